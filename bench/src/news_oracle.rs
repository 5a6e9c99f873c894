//! The `news` workload's queries and its oracle: what each read query must
//! return, computed in plain Rust from the rows of the base tables (the
//! generated data, or a dump of one server's tables), so that a page's
//! answer can be checked without trusting either server's query engine.

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::bail;
use postgres::types::Type;

/// Stories on the front page, and comments on the recent-comments page.
pub const PAGE_SIZE: usize = 25;
/// Stories and comments on a user's page.
pub const USER_PAGE_SIZE: usize = 10;

/// A value in a query's answer, as both servers send it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Val {
    Null,
    Int(i64),
    Text(String),
}

impl std::fmt::Display for Val {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Val::Null => write!(f, "NULL"),
            Val::Int(n) => write!(f, "{n}"),
            Val::Text(s) => write!(f, "{s:?}"),
        }
    }
}

pub type Rows = Vec<Vec<Val>>;

/// A result row's values, by the column types the server declared.
pub fn vals(row: &postgres::Row) -> anyhow::Result<Vec<Val>> {
    let mut out = Vec::with_capacity(row.len());
    for (i, col) in row.columns().iter().enumerate() {
        let v = match *col.type_() {
            Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map(Val::Int),
            Type::INT4 => row
                .try_get::<_, Option<i32>>(i)?
                .map(|n| Val::Int(n.into())),
            Type::INT2 => row
                .try_get::<_, Option<i16>>(i)?
                .map(|n| Val::Int(n.into())),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
                row.try_get::<_, Option<String>>(i)?.map(Val::Text)
            }
            ref other => bail!("column {} has type {other}, not expected here", col.name()),
        };
        out.push(v.unwrap_or(Val::Null));
    }
    Ok(out)
}

/// Rows as one line of text, cut to `max` characters (for reports).
pub fn show(rows: &Rows, max: usize) -> String {
    let text = rows
        .iter()
        .map(|r| {
            let cells: Vec<String> = r.iter().map(|v| v.to_string()).collect();
            format!("({})", cells.join(", "))
        })
        .collect::<Vec<_>>()
        .join(" ");
    let text = format!("{} row(s): {text}", rows.len());
    if text.chars().count() > max {
        let cut: String = text.chars().take(max).collect();
        format!("{cut}...")
    } else {
        text
    }
}

/// The read queries of the pages. Every parameter is a `bigint` id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Q {
    /// `[viewer or profile]`: the user's row.
    User,
    /// `[user]`: votes on the user's stories.
    KarmaStories,
    /// `[user]`: votes on the user's comments.
    KarmaComments,
    /// `[]`: the front page (view `front_page`).
    Front,
    /// `[PAGE_SIZE story ids]`: their tags.
    TagsOf,
    /// `[PAGE_SIZE story ids]`: their numbers of comments.
    CommentCounts,
    /// `[viewer, PAGE_SIZE story ids]`: those the viewer voted for.
    VotedAmong,
    /// `[story]`: the story with its author and score.
    Story,
    /// `[story]`: its tags.
    StoryTags,
    /// `[story, viewer]`: the viewer's vote on it.
    Voted,
    /// `[story]`: its comments with authors and scores.
    Comments,
    /// `[story, viewer]`: the viewer's votes on its comments.
    ViewerCommentVotes,
    /// `[user]`: stories the user wrote.
    StoryCount,
    /// `[user]`: comments the user wrote.
    CommentCount,
    /// `[user]`: the user's newest stories with scores.
    UserStories,
    /// `[user]`: the user's newest comments with their stories' titles.
    UserComments,
    /// `[]`: the newest comments (view `recent_comments`).
    Recent,
    /// `[PAGE_SIZE comment ids]`: their scores.
    CommentScores,
    /// `[viewer, PAGE_SIZE comment ids]`: those the viewer voted for.
    VotedCommentsAmong,
    /// `[story]`: its score (after a vote).
    StoryScore,
    /// `[comment, viewer]`: the viewer's vote on it.
    CommentVoted,
    /// `[comment]`: its score (after a vote).
    CommentScore,
}

/// `$first, ..., $(first + n - 1)`.
fn params(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Q {
    pub const ALL: [Q; 22] = [
        Q::User,
        Q::KarmaStories,
        Q::KarmaComments,
        Q::Front,
        Q::TagsOf,
        Q::CommentCounts,
        Q::VotedAmong,
        Q::Story,
        Q::StoryTags,
        Q::Voted,
        Q::Comments,
        Q::ViewerCommentVotes,
        Q::StoryCount,
        Q::CommentCount,
        Q::UserStories,
        Q::UserComments,
        Q::Recent,
        Q::CommentScores,
        Q::VotedCommentsAmong,
        Q::StoryScore,
        Q::CommentVoted,
        Q::CommentScore,
    ];

    pub fn index(self) -> usize {
        Q::ALL.iter().position(|q| *q == self).expect("listed")
    }

    pub fn name(self) -> String {
        format!("{self:?}")
    }

    /// The statement's text, the same for both servers.
    pub fn sql(self) -> String {
        let n = PAGE_SIZE;
        match self {
            Q::User => "SELECT id, name FROM users WHERE id = $1".into(),
            // Karma is written from `users` with LEFT JOINs and GROUP BY
            // users.id, one row per user. The shorter `SELECT count(*) FROM
            // stories JOIN votes ON ... WHERE stories.user_id = $1` (no GROUP
            // BY) is as natural, but Aqueduct answers it, for every user whose
            // count is 0, by evaluating the query once over all the tables
            // (an aggregate without GROUP BY whose key has no rows in the
            // automatic view: 0.4-0.7 s at the default size, on each page
            // view). For the users the pages ask about (they exist) both
            // forms give the same count.
            Q::KarmaStories => "SELECT users.id, count(votes.user_id) FROM users \
                 LEFT JOIN stories ON stories.user_id = users.id \
                 LEFT JOIN votes ON votes.story_id = stories.id \
                 WHERE users.id = $1 GROUP BY users.id"
                .into(),
            Q::KarmaComments => "SELECT users.id, count(comment_votes.user_id) FROM users \
                 LEFT JOIN comments ON comments.user_id = users.id \
                 LEFT JOIN comment_votes ON comment_votes.comment_id = comments.id \
                 WHERE users.id = $1 GROUP BY users.id"
                .into(),
            Q::Front => "SELECT id, title, url, user_id, author, score FROM front_page \
                 ORDER BY score DESC, id DESC"
                .into(),
            Q::TagsOf => format!(
                "SELECT taggings.story_id, tags.tag FROM taggings JOIN tags ON tags.id = taggings.tag_id \
                 WHERE taggings.story_id IN ({}) ORDER BY taggings.story_id, tags.tag",
                params(1, n)
            ),
            // Written from `stories` (a LEFT JOIN, so a story without comments
            // counts 0) rather than as `SELECT story_id, count(*) FROM comments
            // WHERE story_id IN (...) GROUP BY story_id`: both are natural, and
            // Aqueduct evaluates that single-table form with a full scan of
            // `comments` (it does not use an index for IN lists).
            Q::CommentCounts => format!(
                "SELECT stories.id, count(comments.id) FROM stories \
                 LEFT JOIN comments ON comments.story_id = stories.id \
                 WHERE stories.id IN ({}) GROUP BY stories.id ORDER BY stories.id",
                params(1, n)
            ),
            Q::VotedAmong => format!(
                "SELECT story_id FROM votes WHERE user_id = $1 AND story_id IN ({}) ORDER BY story_id",
                params(2, n)
            ),
            Q::Story => "SELECT stories.id, stories.title, stories.url, stories.user_id, users.name, \
                 count(votes.user_id) AS score \
                 FROM stories JOIN users ON users.id = stories.user_id \
                 LEFT JOIN votes ON votes.story_id = stories.id \
                 WHERE stories.id = $1 \
                 GROUP BY stories.id, stories.title, stories.url, stories.user_id, users.name"
                .into(),
            Q::StoryTags => "SELECT tags.tag FROM taggings JOIN tags ON tags.id = taggings.tag_id \
                 WHERE taggings.story_id = $1 ORDER BY tags.tag"
                .into(),
            Q::Voted => "SELECT user_id FROM votes WHERE story_id = $1 AND user_id = $2".into(),
            Q::Comments => "SELECT comments.id, comments.parent_id, comments.user_id, users.name, \
                 comments.body, count(comment_votes.user_id) AS score \
                 FROM comments JOIN users ON users.id = comments.user_id \
                 LEFT JOIN comment_votes ON comment_votes.comment_id = comments.id \
                 WHERE comments.story_id = $1 \
                 GROUP BY comments.id, comments.parent_id, comments.user_id, users.name, comments.body \
                 ORDER BY comments.id"
                .into(),
            Q::ViewerCommentVotes => "SELECT comment_votes.comment_id FROM comment_votes \
                 JOIN comments ON comments.id = comment_votes.comment_id \
                 WHERE comments.story_id = $1 AND comment_votes.user_id = $2 \
                 ORDER BY comment_votes.comment_id"
                .into(),
            Q::StoryCount => "SELECT count(*) FROM stories WHERE user_id = $1".into(),
            Q::CommentCount => "SELECT count(*) FROM comments WHERE user_id = $1".into(),
            Q::UserStories => format!(
                "SELECT stories.id, stories.title, stories.url, count(votes.user_id) AS score \
                 FROM stories LEFT JOIN votes ON votes.story_id = stories.id \
                 WHERE stories.user_id = $1 GROUP BY stories.id, stories.title, stories.url \
                 ORDER BY stories.id DESC LIMIT {USER_PAGE_SIZE}"
            ),
            Q::UserComments => format!(
                "SELECT comments.id, comments.story_id, stories.title, comments.body \
                 FROM comments JOIN stories ON stories.id = comments.story_id \
                 WHERE comments.user_id = $1 ORDER BY comments.id DESC LIMIT {USER_PAGE_SIZE}"
            ),
            Q::Recent => "SELECT id, story_id, title, user_id, author, body FROM recent_comments \
                 ORDER BY id DESC"
                .into(),
            // From `comments` with a LEFT JOIN, for the reason given at
            // CommentCounts (a single-table `comment_id IN (...)` is a scan
            // in Aqueduct).
            Q::CommentScores => format!(
                "SELECT comments.id, count(comment_votes.user_id) FROM comments \
                 LEFT JOIN comment_votes ON comment_votes.comment_id = comments.id \
                 WHERE comments.id IN ({}) GROUP BY comments.id ORDER BY comments.id",
                params(1, n)
            ),
            Q::VotedCommentsAmong => format!(
                "SELECT comment_id FROM comment_votes WHERE user_id = $1 AND comment_id IN ({}) \
                 ORDER BY comment_id",
                params(2, n)
            ),
            Q::StoryScore => "SELECT count(*) FROM votes WHERE story_id = $1".into(),
            Q::CommentVoted => {
                "SELECT user_id FROM comment_votes WHERE comment_id = $1 AND user_id = $2".into()
            }
            Q::CommentScore => "SELECT count(*) FROM comment_votes WHERE comment_id = $1".into(),
        }
    }
}

/// The tables, and the views over them (the same text on both servers:
/// PostgreSQL expands a view into the query at each read, Aqueduct keeps it
/// maintained). Ids are chosen by the application (no `serial`).
pub const TABLES: [&str; 7] = [
    "CREATE TABLE users (id bigint PRIMARY KEY, name text NOT NULL)",
    "CREATE TABLE stories (id bigint PRIMARY KEY, user_id bigint NOT NULL, title text NOT NULL, url text)",
    "CREATE TABLE tags (id bigint PRIMARY KEY, tag text NOT NULL)",
    "CREATE TABLE taggings (story_id bigint NOT NULL, tag_id bigint NOT NULL, PRIMARY KEY (story_id, tag_id))",
    "CREATE TABLE comments (id bigint PRIMARY KEY, story_id bigint NOT NULL, user_id bigint NOT NULL, \
     parent_id bigint, body text NOT NULL)",
    "CREATE TABLE votes (story_id bigint NOT NULL, user_id bigint NOT NULL, PRIMARY KEY (story_id, user_id))",
    "CREATE TABLE comment_votes (comment_id bigint NOT NULL, user_id bigint NOT NULL, \
     PRIMARY KEY (comment_id, user_id))",
];

/// The foreign-key columns the pages look rows up by (the composite primary
/// keys serve lookups by their first column in PostgreSQL).
pub const INDEXES: [&str; 5] = [
    "CREATE INDEX stories_user_id ON stories (user_id)",
    "CREATE INDEX comments_story_id ON comments (story_id)",
    "CREATE INDEX comments_user_id ON comments (user_id)",
    "CREATE INDEX votes_user_id ON votes (user_id)",
    "CREATE INDEX comment_votes_user_id ON comment_votes (user_id)",
];

/// Aqueduct only: it looks rows up by an index on exactly the columns
/// asked for, never by the first column of a composite primary key, so a
/// story's votes (and a comment's, and a story's tags) need an index of
/// their own there; in PostgreSQL these would duplicate the primary keys.
pub const AQUEDUCT_INDEXES: [&str; 3] = [
    "CREATE INDEX votes_story_id ON votes (story_id)",
    "CREATE INDEX comment_votes_comment_id ON comment_votes (comment_id)",
    "CREATE INDEX taggings_story_id ON taggings (story_id)",
];

/// The two pages that have no parameter to key on are views. The score's
/// name is not `votes`, which PostgreSQL's ORDER BY would take for the table.
pub fn views() -> [String; 2] {
    [
        format!(
            "CREATE VIEW front_page AS \
             SELECT stories.id, stories.title, stories.url, stories.user_id, users.name AS author, \
             count(votes.user_id) AS score \
             FROM stories JOIN users ON users.id = stories.user_id \
             LEFT JOIN votes ON votes.story_id = stories.id \
             GROUP BY stories.id, stories.title, stories.url, stories.user_id, users.name \
             ORDER BY score DESC, stories.id DESC LIMIT {PAGE_SIZE}"
        ),
        format!(
            "CREATE VIEW recent_comments AS \
             SELECT comments.id, comments.story_id, stories.title, comments.user_id, \
             users.name AS author, comments.body \
             FROM comments JOIN stories ON stories.id = comments.story_id \
             JOIN users ON users.id = comments.user_id \
             ORDER BY comments.id DESC LIMIT {PAGE_SIZE}"
        ),
    ]
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoryRow {
    pub user_id: i64,
    pub title: String,
    pub url: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommentRow {
    pub story_id: i64,
    pub user_id: i64,
    pub parent_id: Option<i64>,
    pub body: String,
}

/// The rows of every table, indexed the ways the queries read them.
#[derive(Default)]
pub struct Snapshot {
    users: HashMap<i64, String>,
    stories: BTreeMap<i64, StoryRow>,
    tags: HashMap<i64, String>,
    tags_of_story: HashMap<i64, Vec<i64>>,
    comments: BTreeMap<i64, CommentRow>,
    voters_of_story: HashMap<i64, HashSet<i64>>,
    voters_of_comment: HashMap<i64, HashSet<i64>>,
    comments_of_story: HashMap<i64, Vec<i64>>,
    comments_of_user: HashMap<i64, Vec<i64>>,
    stories_of_user: HashMap<i64, Vec<i64>>,
}

/// The rows of the tables, as loaded or dumped.
#[derive(Default)]
pub struct TableRows {
    pub users: Vec<(i64, String)>,
    pub stories: Vec<(i64, StoryRow)>,
    pub tags: Vec<(i64, String)>,
    pub taggings: Vec<(i64, i64)>,
    pub comments: Vec<(i64, CommentRow)>,
    pub votes: Vec<(i64, i64)>,
    pub comment_votes: Vec<(i64, i64)>,
}

impl TableRows {
    /// Every row of one server's tables, read directly (one-table scans,
    /// which neither server answers from a view).
    pub fn dump(c: &mut postgres::Client) -> anyhow::Result<TableRows> {
        let mut t = TableRows::default();
        for r in c.query("SELECT id, name FROM users", &[])? {
            t.users.push((r.try_get(0)?, r.try_get(1)?));
        }
        for r in c.query("SELECT id, user_id, title, url FROM stories", &[])? {
            t.stories.push((
                r.try_get(0)?,
                StoryRow {
                    user_id: r.try_get(1)?,
                    title: r.try_get(2)?,
                    url: r.try_get(3)?,
                },
            ));
        }
        for r in c.query("SELECT id, tag FROM tags", &[])? {
            t.tags.push((r.try_get(0)?, r.try_get(1)?));
        }
        for r in c.query("SELECT story_id, tag_id FROM taggings", &[])? {
            t.taggings.push((r.try_get(0)?, r.try_get(1)?));
        }
        for r in c.query(
            "SELECT id, story_id, user_id, parent_id, body FROM comments",
            &[],
        )? {
            t.comments.push((
                r.try_get(0)?,
                CommentRow {
                    story_id: r.try_get(1)?,
                    user_id: r.try_get(2)?,
                    parent_id: r.try_get(3)?,
                    body: r.try_get(4)?,
                },
            ));
        }
        for r in c.query("SELECT story_id, user_id FROM votes", &[])? {
            t.votes.push((r.try_get(0)?, r.try_get(1)?));
        }
        for r in c.query("SELECT comment_id, user_id FROM comment_votes", &[])? {
            t.comment_votes.push((r.try_get(0)?, r.try_get(1)?));
        }
        Ok(t)
    }

    pub fn total(&self) -> usize {
        self.users.len()
            + self.stories.len()
            + self.tags.len()
            + self.taggings.len()
            + self.comments.len()
            + self.votes.len()
            + self.comment_votes.len()
    }
}

/// `Val::Text` or `Val::Null`.
fn opt_text(s: &Option<String>) -> Val {
    s.clone().map_or(Val::Null, Val::Text)
}

fn count(n: usize) -> Vec<Vec<Val>> {
    vec![vec![Val::Int(n as i64)]]
}

impl Snapshot {
    pub fn new(t: &TableRows) -> Snapshot {
        let mut s = Snapshot::default();
        for (id, name) in &t.users {
            s.users.insert(*id, name.clone());
        }
        for (id, row) in &t.stories {
            s.stories.insert(*id, row.clone());
            s.stories_of_user.entry(row.user_id).or_default().push(*id);
        }
        for (id, tag) in &t.tags {
            s.tags.insert(*id, tag.clone());
        }
        for (story, tag) in &t.taggings {
            s.tags_of_story.entry(*story).or_default().push(*tag);
        }
        for (id, row) in &t.comments {
            s.comments.insert(*id, row.clone());
            s.comments_of_story
                .entry(row.story_id)
                .or_default()
                .push(*id);
            s.comments_of_user.entry(row.user_id).or_default().push(*id);
        }
        for (story, user) in &t.votes {
            s.voters_of_story.entry(*story).or_default().insert(*user);
        }
        for (comment, user) in &t.comment_votes {
            s.voters_of_comment
                .entry(*comment)
                .or_default()
                .insert(*user);
        }
        for v in s.comments_of_story.values_mut() {
            v.sort_unstable();
        }
        for v in s.comments_of_user.values_mut() {
            v.sort_unstable();
        }
        for v in s.stories_of_user.values_mut() {
            v.sort_unstable();
        }
        s
    }

    pub fn story_score(&self, story: i64) -> usize {
        self.voters_of_story.get(&story).map_or(0, |v| v.len())
    }

    fn comment_score(&self, comment: i64) -> usize {
        self.voters_of_comment.get(&comment).map_or(0, |v| v.len())
    }

    /// Story ids, the most voted first (ties: the newest first).
    pub fn ranking(&self) -> Vec<i64> {
        let mut ids: Vec<(usize, i64)> = self
            .stories
            .iter()
            .filter(|(_, s)| self.users.contains_key(&s.user_id))
            .map(|(id, _)| (self.story_score(*id), *id))
            .collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids.into_iter().map(|(_, id)| id).collect()
    }

    /// The highest story and comment ids.
    pub fn max_ids(&self) -> (i64, i64) {
        (
            self.stories.keys().next_back().copied().unwrap_or(0),
            self.comments.keys().next_back().copied().unwrap_or(0),
        )
    }

    /// What query `q` must return with parameters `p`.
    pub fn answer(&self, q: Q, p: &[i64]) -> Rows {
        let set = |ids: &[i64]| -> Vec<i64> {
            let mut v: Vec<i64> = ids.to_vec();
            v.sort_unstable();
            v.dedup();
            v
        };
        let story_row = |id: i64| -> Option<Vec<Val>> {
            let s = self.stories.get(&id)?;
            let author = self.users.get(&s.user_id)?;
            Some(vec![
                Val::Int(id),
                Val::Text(s.title.clone()),
                opt_text(&s.url),
                Val::Int(s.user_id),
                Val::Text(author.clone()),
                Val::Int(self.story_score(id) as i64),
            ])
        };
        match q {
            Q::User => self
                .users
                .get(&p[0])
                .map(|n| vec![vec![Val::Int(p[0]), Val::Text(n.clone())]])
                .unwrap_or_default(),
            Q::KarmaStories | Q::KarmaComments if !self.users.contains_key(&p[0]) => Vec::new(),
            Q::KarmaStories => {
                let karma: usize = self
                    .stories_of_user
                    .get(&p[0])
                    .map_or(0, |ids| ids.iter().map(|s| self.story_score(*s)).sum());
                vec![vec![Val::Int(p[0]), Val::Int(karma as i64)]]
            }
            Q::KarmaComments => {
                let karma: usize = self
                    .comments_of_user
                    .get(&p[0])
                    .map_or(0, |ids| ids.iter().map(|c| self.comment_score(*c)).sum());
                vec![vec![Val::Int(p[0]), Val::Int(karma as i64)]]
            }
            Q::Front => self
                .ranking()
                .into_iter()
                .take(PAGE_SIZE)
                .filter_map(story_row)
                .collect(),
            Q::TagsOf => {
                let mut rows = Vec::new();
                for s in set(p) {
                    let mut tags: Vec<String> = self
                        .tags_of_story
                        .get(&s)
                        .into_iter()
                        .flatten()
                        .filter_map(|t| self.tags.get(t).cloned())
                        .collect();
                    tags.sort();
                    rows.extend(tags.into_iter().map(|t| vec![Val::Int(s), Val::Text(t)]));
                }
                rows
            }
            Q::CommentCounts => set(p)
                .into_iter()
                .filter(|s| self.stories.contains_key(s))
                .map(|s| {
                    let n = self.comments_of_story.get(&s).map_or(0, |c| c.len());
                    vec![Val::Int(s), Val::Int(n as i64)]
                })
                .collect(),
            Q::VotedAmong => set(&p[1..])
                .into_iter()
                .filter(|s| {
                    self.voters_of_story
                        .get(s)
                        .is_some_and(|v| v.contains(&p[0]))
                })
                .map(|s| vec![Val::Int(s)])
                .collect(),
            Q::Story => story_row(p[0]).into_iter().collect(),
            Q::StoryTags => {
                let mut tags: Vec<String> = self
                    .tags_of_story
                    .get(&p[0])
                    .into_iter()
                    .flatten()
                    .filter_map(|t| self.tags.get(t).cloned())
                    .collect();
                tags.sort();
                tags.into_iter().map(|t| vec![Val::Text(t)]).collect()
            }
            Q::Voted => {
                if self
                    .voters_of_story
                    .get(&p[0])
                    .is_some_and(|v| v.contains(&p[1]))
                {
                    vec![vec![Val::Int(p[1])]]
                } else {
                    Vec::new()
                }
            }
            Q::Comments => self
                .comments_of_story
                .get(&p[0])
                .into_iter()
                .flatten()
                .filter_map(|id| {
                    let c = &self.comments[id];
                    let author = self.users.get(&c.user_id)?;
                    Some(vec![
                        Val::Int(*id),
                        c.parent_id.map_or(Val::Null, Val::Int),
                        Val::Int(c.user_id),
                        Val::Text(author.clone()),
                        Val::Text(c.body.clone()),
                        Val::Int(self.comment_score(*id) as i64),
                    ])
                })
                .collect(),
            Q::ViewerCommentVotes => self
                .comments_of_story
                .get(&p[0])
                .into_iter()
                .flatten()
                .filter(|c| {
                    self.voters_of_comment
                        .get(c)
                        .is_some_and(|v| v.contains(&p[1]))
                })
                .map(|c| vec![Val::Int(*c)])
                .collect(),
            Q::StoryCount => count(self.stories_of_user.get(&p[0]).map_or(0, |v| v.len())),
            Q::CommentCount => count(self.comments_of_user.get(&p[0]).map_or(0, |v| v.len())),
            Q::UserStories => self
                .stories_of_user
                .get(&p[0])
                .into_iter()
                .flatten()
                .rev()
                .take(USER_PAGE_SIZE)
                .map(|id| {
                    let s = &self.stories[id];
                    vec![
                        Val::Int(*id),
                        Val::Text(s.title.clone()),
                        opt_text(&s.url),
                        Val::Int(self.story_score(*id) as i64),
                    ]
                })
                .collect(),
            Q::UserComments => self
                .comments_of_user
                .get(&p[0])
                .into_iter()
                .flatten()
                .rev()
                .filter_map(|id| {
                    let c = &self.comments[id];
                    let story = self.stories.get(&c.story_id)?;
                    Some(vec![
                        Val::Int(*id),
                        Val::Int(c.story_id),
                        Val::Text(story.title.clone()),
                        Val::Text(c.body.clone()),
                    ])
                })
                .take(USER_PAGE_SIZE)
                .collect(),
            Q::Recent => self
                .comments
                .iter()
                .rev()
                .filter_map(|(id, c)| {
                    let story = self.stories.get(&c.story_id)?;
                    let author = self.users.get(&c.user_id)?;
                    Some(vec![
                        Val::Int(*id),
                        Val::Int(c.story_id),
                        Val::Text(story.title.clone()),
                        Val::Int(c.user_id),
                        Val::Text(author.clone()),
                        Val::Text(c.body.clone()),
                    ])
                })
                .take(PAGE_SIZE)
                .collect(),
            Q::CommentScores => set(p)
                .into_iter()
                .filter(|c| self.comments.contains_key(c))
                .map(|c| vec![Val::Int(c), Val::Int(self.comment_score(c) as i64)])
                .collect(),
            Q::VotedCommentsAmong => set(&p[1..])
                .into_iter()
                .filter(|c| {
                    self.voters_of_comment
                        .get(c)
                        .is_some_and(|v| v.contains(&p[0]))
                })
                .map(|c| vec![Val::Int(c)])
                .collect(),
            Q::StoryScore => count(self.story_score(p[0])),
            Q::CommentVoted => {
                if self
                    .voters_of_comment
                    .get(&p[0])
                    .is_some_and(|v| v.contains(&p[1]))
                {
                    vec![vec![Val::Int(p[1])]]
                } else {
                    Vec::new()
                }
            }
            Q::CommentScore => count(self.comment_score(p[0])),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Snapshot {
        let story = |user_id, title: &str| StoryRow {
            user_id,
            title: title.into(),
            url: None,
        };
        let comment = |story_id, user_id, parent_id| CommentRow {
            story_id,
            user_id,
            parent_id,
            body: format!("on {story_id}"),
        };
        Snapshot::new(&TableRows {
            users: vec![(1, "ann".into()), (2, "bo".into()), (3, "cy".into())],
            stories: vec![(1, story(1, "a")), (2, story(2, "b")), (3, story(1, "c"))],
            tags: vec![(1, "rust".into()), (2, "db".into())],
            taggings: vec![(1, 1), (1, 2), (3, 2)],
            comments: vec![(1, comment(1, 2, None)), (2, comment(1, 3, Some(1)))],
            votes: vec![(2, 1), (2, 3), (3, 2), (1, 3)],
            comment_votes: vec![(1, 1), (2, 1), (2, 2)],
        })
    }

    #[test]
    fn the_oracle_ranks_counts_and_orders_as_the_queries_say() {
        let s = tiny();
        let ids = |rows: Rows| -> Vec<Val> { rows.into_iter().map(|r| r[0].clone()).collect() };
        // Story 2 has two votes; 3 and 1 one each (the newer first).
        assert_eq!(
            ids(s.answer(Q::Front, &[])),
            vec![Val::Int(2), Val::Int(3), Val::Int(1)]
        );
        // Ann wrote stories 1 and 3 (one vote each) and no comments; Cy
        // wrote comment 2, which has two votes.
        let karma = |u, k| vec![vec![Val::Int(u), Val::Int(k)]];
        assert_eq!(s.answer(Q::KarmaStories, &[1]), karma(1, 2));
        assert_eq!(s.answer(Q::KarmaComments, &[3]), karma(3, 2));
        assert_eq!(s.answer(Q::KarmaComments, &[1]), karma(1, 0));
        assert!(s.answer(Q::KarmaStories, &[9]).is_empty());
        assert_eq!(
            s.answer(Q::TagsOf, &[3, 1, 0, 1]),
            vec![
                vec![Val::Int(1), Val::Text("db".into())],
                vec![Val::Int(1), Val::Text("rust".into())],
                vec![Val::Int(3), Val::Text("db".into())],
            ]
        );
        assert_eq!(
            s.answer(Q::CommentCounts, &[2, 1, 0]),
            vec![
                vec![Val::Int(1), Val::Int(2)],
                vec![Val::Int(2), Val::Int(0)]
            ]
        );
        assert_eq!(
            ids(s.answer(Q::VotedAmong, &[3, 1, 2, 3])),
            vec![Val::Int(1), Val::Int(2)]
        );
        let comments = s.answer(Q::Comments, &[1]);
        assert_eq!(comments.len(), 2);
        assert_eq!(comments[1][1], Val::Int(1));
        assert_eq!(comments[1][5], Val::Int(2));
        assert_eq!(
            ids(s.answer(Q::Recent, &[])),
            vec![Val::Int(2), Val::Int(1)]
        );
        assert_eq!(
            ids(s.answer(Q::UserStories, &[1])),
            vec![Val::Int(3), Val::Int(1)]
        );
        assert!(s.answer(Q::Voted, &[1, 1]).is_empty());
        assert_eq!(s.answer(Q::Voted, &[1, 3]), vec![vec![Val::Int(3)]]);
        assert_eq!(s.answer(Q::StoryScore, &[9]), count(0));
    }
}
