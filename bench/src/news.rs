//! `bench news`: a news aggregator modelled on the Noria paper's Lobsters
//! evaluation, written from the pages such a site serves. The metric is
//! page views per second: the highest offered load (open loop) at which a
//! page view's p95 latency stays under 100 ms while the server keeps up.
//!
//! Pages (one page view = one operation, run on one connection, one query
//! after another, as a web server's request handler would):
//!
//! | page | share | queries |
//! |---|---|---|
//! | story: the story with its score, tags, comments with authors and scores, the viewer's votes | 50 % | 8 |
//! | front page: the 25 most voted stories with authors, tags, comment counts, the viewer's votes | 30 % | 7 |
//! | user: karma (votes on the user's stories and on their comments), counts, newest stories and comments | 7 % | 10 |
//! | recent comments: the 25 newest with their stories' titles, scores, the viewer's votes | 6 % | 6 |
//! | vote on a story (or take the vote back), then its new score | 3 % | 6 |
//! | vote on a comment (or take it back), then its new score | 2.5 % | 6 |
//! | post a comment, then the story page | 1 % | 12 |
//! | post a story with tags (one transaction), then its page | 0.5 % | 15-16 |
//!
//! Every page starts with the header: the signed-in viewer's row and karma
//! (3 queries); a page view runs 7.7 statements on average. Scores, karma
//! and counts are `count(*)` over the votes and comments at read time: the
//! schema has no counter columns. Popularity is skewed: stories, viewers,
//! authors and voters are drawn with Zipf's law.
//!
//! Both servers get the same statements (prepared, over the PostgreSQL
//! protocol, `postgres` crate) and the same generated data. The two pages
//! with nothing to key on (front page, recent comments) read a view, created
//! with the same text on both: PostgreSQL expands it into the query at each
//! read; Aqueduct keeps it maintained. The other queries are plain prepared
//! statements with `col = $n` parameters, which Aqueduct serves from
//! automatic views. Where Aqueduct needs a spelling PostgreSQL would not, a
//! comment at the query (in `news_oracle.rs`) says why.
//!
//! The offered loads are run one after another, both servers per load (the
//! order alternating), each server started and loaded once. The answers are
//! checked against an oracle computed from the table rows: after loading
//! (both servers against the generated data, and against each other) and at
//! the end (each server against a dump of its own tables).

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context};
use clap::Args;
use indicatif::ProgressBar;
use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Client, Statement};
use rand::rngs::{SmallRng, StdRng};
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::aqueduct_server::AqueductServer;
use crate::common::{self, check_stop, ms, print_table, thousands};
use crate::cpu::{self, CpuUse};
use crate::load::{self, Ids, Mode, Schedule};
use crate::news_oracle::{
    self as oracle, CommentRow, Rows, Snapshot, StoryRow, TableRows, PAGE_SIZE, Q,
};
use crate::pg::PgServer;
use crate::sql_point::Backend;

#[derive(Args, Debug, Serialize)]
pub struct NewsArgs {
    /// Servers to measure, comma-separated.
    #[arg(
        long,
        alias = "backend",
        value_delimiter = ',',
        default_value = "aqueduct,postgres"
    )]
    pub backends: Vec<Backend>,
    #[arg(long, default_value_t = 5_000)]
    pub users: u64,
    #[arg(long, default_value_t = 20_000)]
    pub stories: u64,
    #[arg(long, default_value_t = 100_000)]
    pub comments: u64,
    /// Preloaded votes on stories (one per user and story).
    #[arg(long, default_value_t = 100_000)]
    pub votes: u64,
    /// Preloaded votes on comments (one per user and comment).
    #[arg(long, default_value_t = 100_000)]
    pub comment_votes: u64,
    /// Zipf exponent of the popularity of stories and the activity of users:
    /// a number, `uniform` (0) or `zipf:<s>` as the vote workload takes it.
    #[arg(long, default_value = "1.15", value_parser = parse_zipf)]
    pub zipf: f64,
    /// Client connections, one thread each.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Offered page views per second of the open-loop sweep, comma-separated
    /// (steps of about 1.5x: PostgreSQL saturates below 50 at the default
    /// size, Aqueduct in the hundreds).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10,15,20,30,50,75,100,150,200,300,500,750,1000,1500,2000,3000"
    )]
    pub target_ops: Vec<f64>,
    /// One closed-loop run per server (each client sends its next page
    /// request when the last is answered) instead of the sweep.
    #[arg(long)]
    pub closed: bool,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Unmeasured seconds at the start of each run.
    #[arg(long, default_value_t = 3.0)]
    pub warmup: f64,
    /// Run every offered load on every server (by default a server that
    /// missed the target at two loads in a row is not run at higher ones).
    #[arg(long)]
    pub all_points: bool,
    /// Aqueduct's --fsync (PostgreSQL runs with fsync=on, synchronous_commit=on).
    #[arg(long, default_value = "always")]
    pub fsync: String,
    /// The Aqueduct server binary [default: `aqueduct` next to this binary].
    #[arg(long)]
    #[serde(skip)]
    pub aqueduct_bin: Option<PathBuf>,
    /// Directory holding PostgreSQL 15's initdb, pg_ctl and postgres.
    #[arg(
        long,
        env = "AQUEDUCT_BENCH_PG_BIN",
        default_value = "/usr/lib/postgresql/15/bin"
    )]
    #[serde(skip)]
    pub pg_bin: PathBuf,
    /// Where scratch directories go; default: the temp dir.
    #[arg(long)]
    #[serde(skip)]
    pub dir: Option<PathBuf>,
    /// Also write a JSON summary here.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

fn parse_zipf(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s >= 0.0 && s.is_finite() => Ok(s),
        Ok(_) => Err("the Zipf exponent must be at least 0".into()),
        Err(_) => load::parse_exponent(text).map_err(|e| e.to_string()),
    }
}

/// A page view is within the target when its p95 is under this...
const P95_LIMIT_MS: f64 = 100.0;
/// ... and at least this share of the offered page views were served.
const ACHIEVED_SHARE: f64 = 0.95;
/// Comments one story gets at most in the generated data (the most popular
/// stories would otherwise get thousands, which no discussion page shows).
pub const MAX_COMMENTS_PER_STORY: usize = 200;
/// Rows per INSERT when loading.
const LOAD_BATCH: usize = 1000;
/// Mismatches kept in full in the report (all are counted).
const MISMATCHES_KEPT: usize = 20;

// ---------------------------------------------------------------------------
// The generated data.

const TAGS: [&str; 20] = [
    "rust",
    "databases",
    "distributed",
    "programming",
    "security",
    "networking",
    "hardware",
    "compilers",
    "web",
    "ask",
    "show",
    "practices",
    "performance",
    "math",
    "history",
    "culture",
    "release",
    "unix",
    "testing",
    "visualization",
];

const WORDS: [&str; 48] = [
    "a",
    "the",
    "of",
    "on",
    "for",
    "with",
    "without",
    "into",
    "why",
    "how",
    "fast",
    "slow",
    "simple",
    "tiny",
    "large",
    "new",
    "old",
    "notes",
    "lessons",
    "thoughts",
    "query",
    "queries",
    "index",
    "views",
    "cache",
    "stream",
    "dataflow",
    "kernel",
    "compiler",
    "parser",
    "types",
    "memory",
    "threads",
    "locks",
    "joins",
    "counts",
    "latency",
    "throughput",
    "protocol",
    "log",
    "replication",
    "storage",
    "engine",
    "design",
    "bugs",
    "proof",
    "benchmark",
    "release",
];

/// How much of each table to generate.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct Sizes {
    pub users: u64,
    pub stories: u64,
    pub comments: u64,
    pub votes: u64,
    pub comment_votes: u64,
}

/// The generated rows, and the comments of each story (for drawing the
/// comments voted on).
pub struct Data {
    pub rows: TableRows,
    comments_of_story: Vec<Vec<i64>>,
}

fn words(rng: &mut impl Rng, min: usize, max: usize) -> String {
    let n = rng.gen_range(min..=max);
    (0..n)
        .map(|_| WORDS[rng.gen_range(0..WORDS.len())])
        .collect::<Vec<_>>()
        .join(" ")
}

fn title(rng: &mut impl Rng) -> String {
    let mut t = words(rng, 3, 8);
    if let Some(first) = t.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    t
}

/// Adds `(a, b)` drawn by `first` and `second` to `seen`, unless taken: then
/// with `second` redrawn uniformly a few times, then everything redrawn.
/// Fails when the pairs are too crowded to find a free one.
fn unique_pair(
    rng: &mut StdRng,
    seen: &mut HashSet<(i64, i64)>,
    mut first: impl FnMut(&mut StdRng) -> i64,
    second: &Ids,
    second_n: u64,
) -> anyhow::Result<(i64, i64)> {
    for _ in 0..10_000 {
        let a = first(rng);
        let b = second.draw(rng);
        if seen.insert((a, b)) {
            return Ok((a, b));
        }
        for _ in 0..4 {
            let b = rng.gen_range(1..=second_n as i64);
            if seen.insert((a, b)) {
                return Ok((a, b));
            }
        }
    }
    bail!("could not find a free (id, user) pair in 10,000 draws: too many votes for the data size")
}

/// The data of one run, fixed by `seed`. Story, user and comment ids count
/// from 1; with Zipf's law the lowest ids are the most popular stories and
/// the most active users.
pub fn generate(sizes: Sizes, zipf: f64, seed: u64) -> anyhow::Result<Data> {
    let Sizes {
        users,
        stories,
        comments,
        votes,
        comment_votes,
    } = sizes;
    ensure!(
        users >= 1 && stories >= 1,
        "--users and --stories must be at least 1"
    );
    ensure!(
        comments <= stories * MAX_COMMENTS_PER_STORY as u64 / 2,
        "--comments {comments}: at most {} per story on average",
        MAX_COMMENTS_PER_STORY / 2
    );
    ensure!(
        votes <= stories * users / 2,
        "--votes {votes}: at most half of all (story, user) pairs"
    );
    ensure!(
        comment_votes <= comments * users / 2,
        "--comment-votes {comment_votes}: at most half of all (comment, user) pairs"
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let story_ids = Ids::new(stories, zipf);
    let user_ids = Ids::new(users, zipf);
    let mut rows = TableRows {
        users: (1..=users as i64)
            .map(|id| (id, format!("user{id:05}")))
            .collect(),
        tags: TAGS
            .iter()
            .enumerate()
            .map(|(i, t)| (i as i64 + 1, t.to_string()))
            .collect(),
        ..TableRows::default()
    };
    for id in 1..=stories as i64 {
        let user_id = user_ids.draw(&mut rng);
        let title = title(&mut rng);
        let url = rng
            .gen_bool(0.8)
            .then(|| format!("https://example.com/{}/{id}", rng.gen_range(1000..10_000)));
        rows.stories.push((
            id,
            StoryRow {
                user_id,
                title,
                url,
            },
        ));
        let mut tags: Vec<i64> = Vec::new();
        for _ in 0..rng.gen_range(1..=3) {
            let t = rng.gen_range(1..=TAGS.len() as i64);
            if !tags.contains(&t) {
                tags.push(t);
            }
        }
        tags.sort_unstable();
        rows.taggings.extend(tags.into_iter().map(|t| (id, t)));
    }
    let mut comments_of_story: Vec<Vec<i64>> = vec![Vec::new(); stories as usize];
    for id in 1..=comments as i64 {
        let mut story = story_ids.draw(&mut rng);
        let mut tries = 0;
        while comments_of_story[story as usize - 1].len() >= MAX_COMMENTS_PER_STORY {
            tries += 1;
            story = if tries < 1000 {
                story_ids.draw(&mut rng)
            } else {
                rng.gen_range(1..=stories as i64)
            };
        }
        let siblings = &mut comments_of_story[story as usize - 1];
        let parent_id = (!siblings.is_empty() && rng.gen_bool(0.6))
            .then(|| siblings[rng.gen_range(0..siblings.len())]);
        siblings.push(id);
        rows.comments.push((
            id,
            CommentRow {
                story_id: story,
                user_id: user_ids.draw(&mut rng),
                parent_id,
                body: words(&mut rng, 4, 24),
            },
        ));
    }
    let mut seen = HashSet::new();
    for _ in 0..votes {
        let pair = unique_pair(&mut rng, &mut seen, |r| story_ids.draw(r), &user_ids, users)?;
        rows.votes.push(pair);
    }
    let mut seen = HashSet::new();
    for _ in 0..comment_votes {
        let of_story = &comments_of_story;
        let pick = |r: &mut StdRng| loop {
            let story = story_ids.draw(r);
            let list = &of_story[story as usize - 1];
            if !list.is_empty() {
                return list[r.gen_range(0..list.len())];
            }
        };
        let pair = unique_pair(&mut rng, &mut seen, pick, &user_ids, users)?;
        rows.comment_votes.push(pair);
    }
    Ok(Data {
        rows,
        comments_of_story,
    })
}

// ---------------------------------------------------------------------------
// Pages.

const KINDS: [&str; 8] = [
    "story",
    "front_page",
    "user",
    "recent_comments",
    "vote_story",
    "vote_comment",
    "post_comment",
    "post_story",
];

/// Page views of each kind per 1,000, in the order of `KINDS`.
const MIX: [u32; 8] = [500, 300, 70, 60, 30, 25, 10, 5];

#[derive(Debug)]
enum Page {
    Story {
        viewer: i64,
        story: i64,
    },
    Front {
        viewer: i64,
    },
    User {
        viewer: i64,
        profile: i64,
    },
    Recent {
        viewer: i64,
    },
    VoteStory {
        viewer: i64,
        story: i64,
    },
    VoteComment {
        viewer: i64,
        comment: i64,
    },
    PostComment {
        viewer: i64,
        story: i64,
        parent: Option<i64>,
        body: String,
    },
    PostStory {
        viewer: i64,
        title: String,
        url: Option<String>,
        tags: Vec<i64>,
    },
}

/// Draws page views: who views (Zipf over users), which story and whose
/// profile (Zipf), which comment (a comment of a Zipf-drawn story).
struct Draws<'a> {
    stories: Ids,
    users: Ids,
    data: &'a Data,
}

impl Draws<'_> {
    fn new(data: &Data, zipf: f64) -> Draws<'_> {
        Draws {
            stories: Ids::new(data.rows.stories.len() as u64, zipf),
            users: Ids::new(data.rows.users.len() as u64, zipf),
            data,
        }
    }

    fn comment(&self, rng: &mut SmallRng) -> i64 {
        for _ in 0..100 {
            let list = &self.data.comments_of_story[self.stories.draw(rng) as usize - 1];
            if !list.is_empty() {
                return list[rng.gen_range(0..list.len())];
            }
        }
        rng.gen_range(1..=self.data.rows.comments.len().max(1) as i64)
    }

    fn draw(&self, rng: &mut SmallRng) -> (usize, Page) {
        let mut x = rng.gen_range(0..MIX.iter().sum::<u32>());
        let mut kind = 0;
        while x >= MIX[kind] {
            x -= MIX[kind];
            kind += 1;
        }
        let viewer = self.users.draw(rng);
        let page = match kind {
            0 => Page::Story {
                viewer,
                story: self.stories.draw(rng),
            },
            1 => Page::Front { viewer },
            2 => Page::User {
                viewer,
                profile: self.users.draw(rng),
            },
            3 => Page::Recent { viewer },
            4 => Page::VoteStory {
                viewer,
                story: self.stories.draw(rng),
            },
            5 => Page::VoteComment {
                viewer,
                comment: self.comment(rng),
            },
            6 => {
                let story = self.stories.draw(rng);
                let list = &self.data.comments_of_story[story as usize - 1];
                let parent = (!list.is_empty() && rng.gen_bool(0.6))
                    .then(|| list[rng.gen_range(0..list.len())]);
                Page::PostComment {
                    viewer,
                    story,
                    parent,
                    body: words(rng, 4, 24),
                }
            }
            _ => {
                let mut tags = vec![rng.gen_range(1..=TAGS.len() as i64)];
                if rng.gen_bool(0.5) {
                    let t = rng.gen_range(1..=TAGS.len() as i64);
                    if t != tags[0] {
                        tags.push(t);
                    }
                }
                Page::PostStory {
                    viewer,
                    title: title(rng),
                    url: rng
                        .gen_bool(0.8)
                        .then(|| format!("https://example.com/new/{}", rng.gen::<u32>())),
                    tags,
                }
            }
        };
        (kind, page)
    }
}

/// What the connections of one server share: the next ids to write (the
/// application picks its keys) and the wrong answers seen during runs.
struct Shared {
    next_story: AtomicI64,
    next_comment: AtomicI64,
    wrong: AtomicU64,
    wrong_samples: Mutex<Vec<String>>,
    /// Transactions tried again after SQLSTATE 40001.
    retries: AtomicU64,
}

struct Writes {
    vote: Statement,
    unvote: Statement,
    comment_vote: Statement,
    comment_unvote: Statement,
    insert_story: Statement,
    insert_tagging: Statement,
    insert_comment: Statement,
}

const W_VOTE: &str = "INSERT INTO votes (story_id, user_id) VALUES ($1, $2) ON CONFLICT DO NOTHING";
const W_UNVOTE: &str = "DELETE FROM votes WHERE story_id = $1 AND user_id = $2";
const W_COMMENT_VOTE: &str =
    "INSERT INTO comment_votes (comment_id, user_id) VALUES ($1, $2) ON CONFLICT DO NOTHING";
const W_COMMENT_UNVOTE: &str = "DELETE FROM comment_votes WHERE comment_id = $1 AND user_id = $2";
const W_INSERT_STORY: &str =
    "INSERT INTO stories (id, user_id, title, url) VALUES ($1, $2, $3, $4)";
const W_INSERT_TAGGING: &str = "INSERT INTO taggings (story_id, tag_id) VALUES ($1, $2)";
const W_INSERT_COMMENT: &str =
    "INSERT INTO comments (id, story_id, user_id, parent_id, body) VALUES ($1, $2, $3, $4, $5)";

/// One client connection with every statement prepared.
struct Conn {
    client: Client,
    reads: Vec<Statement>,
    writes: Writes,
    shared: Arc<Shared>,
}

/// `ids` padded with 0 (no such row) to `PAGE_SIZE`, for the IN lists.
fn padded(ids: impl Iterator<Item = i64>) -> Vec<i64> {
    let mut v: Vec<i64> = ids.take(PAGE_SIZE).collect();
    v.resize(PAGE_SIZE, 0);
    v
}

impl Conn {
    fn new(mut client: Client, shared: Arc<Shared>) -> anyhow::Result<Conn> {
        let mut reads = Vec::with_capacity(Q::ALL.len());
        for q in Q::ALL {
            let sql = q.sql();
            reads.push(
                client
                    .prepare(&sql)
                    .with_context(|| format!("preparing {q:?}: {sql}"))?,
            );
        }
        let mut prep = |sql: &str| {
            client
                .prepare(sql)
                .with_context(|| format!("preparing {sql}"))
        };
        let writes = Writes {
            vote: prep(W_VOTE)?,
            unvote: prep(W_UNVOTE)?,
            comment_vote: prep(W_COMMENT_VOTE)?,
            comment_unvote: prep(W_COMMENT_UNVOTE)?,
            insert_story: prep(W_INSERT_STORY)?,
            insert_tagging: prep(W_INSERT_TAGGING)?,
            insert_comment: prep(W_INSERT_COMMENT)?,
        };
        Ok(Conn {
            client,
            reads,
            writes,
            shared,
        })
    }

    fn rows(&mut self, q: Q, p: &[i64]) -> anyhow::Result<Vec<postgres::Row>> {
        let params: Vec<&(dyn ToSql + Sync)> = p.iter().map(|x| x as &(dyn ToSql + Sync)).collect();
        self.client
            .query(&self.reads[q.index()], &params)
            .with_context(|| format!("{q:?} {p:?}"))
    }

    fn read(&mut self, q: Q, p: &[i64]) -> anyhow::Result<Rows> {
        self.rows(q, p)?.iter().map(oracle::vals).collect()
    }

    /// Counts a wrong answer seen during a run and makes the page fail.
    fn wrong(&self, what: String) -> anyhow::Error {
        self.shared.wrong.fetch_add(1, Ordering::Relaxed);
        let mut s = self.shared.wrong_samples.lock().expect("not poisoned");
        if s.len() < MISMATCHES_KEPT {
            s.push(what.clone());
        }
        anyhow!("wrong answer: {what}")
    }

    /// Exactly one row, or a wrong answer.
    fn one(&mut self, q: Q, p: &[i64]) -> anyhow::Result<postgres::Row> {
        let mut rows = self.rows(q, p)?;
        if rows.len() != 1 {
            return Err(self.wrong(format!("{q:?} {p:?} gave {} rows, not 1", rows.len())));
        }
        Ok(rows.pop().expect("one row"))
    }

    fn header(&mut self, viewer: i64) -> anyhow::Result<()> {
        self.one(Q::User, &[viewer])?;
        self.one(Q::KarmaStories, &[viewer])?;
        self.one(Q::KarmaComments, &[viewer])?;
        Ok(())
    }

    fn story(&mut self, viewer: i64, story: i64, with_comment: Option<i64>) -> anyhow::Result<()> {
        self.header(viewer)?;
        self.one(Q::Story, &[story])?;
        self.rows(Q::StoryTags, &[story])?;
        self.rows(Q::Voted, &[story, viewer])?;
        let comments = self.rows(Q::Comments, &[story])?;
        if let Some(id) = with_comment {
            if !comments.iter().any(|r| r.get::<_, i64>(0) == id) {
                return Err(self.wrong(format!(
                    "story {story}'s page lacks comment {id} just posted on it"
                )));
            }
        }
        self.rows(Q::ViewerCommentVotes, &[story, viewer])?;
        Ok(())
    }

    fn page(&mut self, page: &Page) -> anyhow::Result<()> {
        match *page {
            Page::Story { viewer, story } => self.story(viewer, story, None),
            Page::Front { viewer } => {
                self.header(viewer)?;
                let front = self.rows(Q::Front, &[])?;
                let ids = padded(front.iter().map(|r| r.get::<_, i64>(0)));
                self.rows(Q::TagsOf, &ids)?;
                self.rows(Q::CommentCounts, &ids)?;
                let mut p = vec![viewer];
                p.extend(&ids);
                self.rows(Q::VotedAmong, &p)?;
                Ok(())
            }
            Page::User { viewer, profile } => {
                self.header(viewer)?;
                self.one(Q::User, &[profile])?;
                for q in [
                    Q::KarmaStories,
                    Q::KarmaComments,
                    Q::StoryCount,
                    Q::CommentCount,
                ] {
                    self.one(q, &[profile])?;
                }
                self.rows(Q::UserStories, &[profile])?;
                self.rows(Q::UserComments, &[profile])?;
                Ok(())
            }
            Page::Recent { viewer } => {
                self.header(viewer)?;
                let recent = self.rows(Q::Recent, &[])?;
                let ids = padded(recent.iter().map(|r| r.get::<_, i64>(0)));
                self.rows(Q::CommentScores, &ids)?;
                let mut p = vec![viewer];
                p.extend(&ids);
                self.rows(Q::VotedCommentsAmong, &p)?;
                Ok(())
            }
            Page::VoteStory { viewer, story } => {
                self.header(viewer)?;
                let voted = !self.rows(Q::Voted, &[story, viewer])?.is_empty();
                let st = if voted {
                    &self.writes.unvote
                } else {
                    &self.writes.vote
                };
                self.client.execute(st, &[&story, &viewer])?;
                self.one(Q::StoryScore, &[story])?;
                Ok(())
            }
            Page::VoteComment { viewer, comment } => {
                self.header(viewer)?;
                let voted = !self.rows(Q::CommentVoted, &[comment, viewer])?.is_empty();
                let st = if voted {
                    &self.writes.comment_unvote
                } else {
                    &self.writes.comment_vote
                };
                self.client.execute(st, &[&comment, &viewer])?;
                self.one(Q::CommentScore, &[comment])?;
                Ok(())
            }
            Page::PostComment {
                viewer,
                story,
                parent,
                ref body,
            } => {
                self.header(viewer)?;
                let id = self.shared.next_comment.fetch_add(1, Ordering::Relaxed);
                self.client.execute(
                    &self.writes.insert_comment,
                    &[&id, &story, &viewer, &parent, body],
                )?;
                self.story(viewer, story, Some(id))
            }
            Page::PostStory {
                viewer,
                ref title,
                ref url,
                ref tags,
            } => {
                self.header(viewer)?;
                let id = self.shared.next_story.fetch_add(1, Ordering::Relaxed);
                // A serializable database may refuse a transaction with
                // SQLSTATE 40001; the site tries it again, as drivers do.
                let mut attempt = 1;
                loop {
                    match post_story(&mut self.client, &self.writes, id, viewer, title, url, tags) {
                        Ok(()) => break,
                        Err(e)
                            if attempt < TXN_ATTEMPTS
                                && e.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE) =>
                        {
                            self.shared.retries.fetch_add(1, Ordering::Relaxed);
                            attempt += 1;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                // The new story's page: it must be there at once.
                self.story(viewer, id, None)
            }
        }
    }
}

/// Tries of a transaction refused with SQLSTATE 40001 (serialization failure).
const TXN_ATTEMPTS: usize = 5;

/// The story and its tags, in one transaction.
fn post_story(
    client: &mut Client,
    w: &Writes,
    id: i64,
    viewer: i64,
    title: &str,
    url: &Option<String>,
    tags: &[i64],
) -> Result<(), postgres::Error> {
    let mut t = client.transaction()?;
    t.execute(&w.insert_story, &[&id, &viewer, &title, url])?;
    for tag in tags {
        t.execute(&w.insert_tagging, &[&id, tag])?;
    }
    t.commit()
}

// ---------------------------------------------------------------------------
// Servers and loading.

enum Server {
    Aqueduct(AqueductServer),
    Postgres(PgServer),
}

impl Server {
    fn connect(&self) -> anyhow::Result<Client> {
        match self {
            Server::Aqueduct(s) => s.connect(),
            Server::Postgres(s) => s.connect(),
        }
    }

    fn pid(&self) -> Option<u32> {
        match self {
            Server::Aqueduct(s) => Some(s.pid()),
            Server::Postgres(s) => s.postmaster_pid(),
        }
    }

    /// Adds the server's own log to an error, when it has one.
    fn explain(&self, e: anyhow::Error) -> anyhow::Error {
        match self {
            Server::Aqueduct(s) => {
                e.context(format!("Aqueduct server log (tail):\n{}", s.log_tail()))
            }
            Server::Postgres(_) => e,
        }
    }
}

/// A started and loaded server with its client connections.
struct Live {
    backend: Backend,
    server: Server,
    version: String,
    load_seconds: f64,
    shared: Arc<Shared>,
    conns: Vec<Conn>,
    /// For the checks, outside the measured runs.
    checker: Conn,
}

fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn opt_lit(s: &Option<String>) -> String {
    s.as_deref().map_or_else(|| "NULL".to_string(), lit)
}

/// INSERTs of `LOAD_BATCH` rows each.
fn insert_all(
    c: &mut Client,
    server: &Server,
    head: &str,
    rows: impl Iterator<Item = String>,
    pb: &ProgressBar,
) -> anyhow::Result<()> {
    let mut batch: Vec<String> = Vec::with_capacity(LOAD_BATCH);
    let mut flush = |batch: &mut Vec<String>| -> anyhow::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        check_stop()?;
        let sql = format!("{head} {}", batch.join(", "));
        c.batch_execute(&sql)
            .map_err(|e| server.explain(anyhow!("{head} ... ({} rows): {e}", batch.len())))?;
        pb.inc(batch.len() as u64);
        batch.clear();
        Ok(())
    };
    for r in rows {
        batch.push(r);
        if batch.len() == LOAD_BATCH {
            flush(&mut batch)?;
        }
    }
    flush(&mut batch)
}

/// Creates the schema, loads the data and creates the views; returns the
/// seconds it took.
fn load_data(server: &Server, backend: Backend, data: &Data) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut c = server.connect()?;
    let mut ddl: Vec<String> = oracle::TABLES.iter().map(|s| s.to_string()).collect();
    ddl.extend(oracle::INDEXES.iter().map(|s| s.to_string()));
    if backend == Backend::Aqueduct {
        ddl.extend(oracle::AQUEDUCT_INDEXES.iter().map(|s| s.to_string()));
    }
    for s in &ddl {
        c.batch_execute(s)
            .map_err(|e| server.explain(anyhow!("{s}: {e}")))?;
    }
    let r = &data.rows;
    let pb = common::progress(
        r.total() as u64,
        "{spinner} {prefix} [{elapsed_precise}] [{bar:30}] {pos}/{len} rows",
    );
    pb.set_prefix(format!("loading {}", backend.name()));
    insert_all(
        &mut c,
        server,
        "INSERT INTO users (id, name) VALUES",
        r.users.iter().map(|(id, n)| format!("({id}, {})", lit(n))),
        &pb,
    )?;
    insert_all(
        &mut c,
        server,
        "INSERT INTO tags (id, tag) VALUES",
        r.tags.iter().map(|(id, t)| format!("({id}, {})", lit(t))),
        &pb,
    )?;
    insert_all(
        &mut c,
        server,
        "INSERT INTO stories (id, user_id, title, url) VALUES",
        r.stories.iter().map(|(id, s)| {
            format!(
                "({id}, {}, {}, {})",
                s.user_id,
                lit(&s.title),
                opt_lit(&s.url)
            )
        }),
        &pb,
    )?;
    insert_all(
        &mut c,
        server,
        "INSERT INTO taggings (story_id, tag_id) VALUES",
        r.taggings.iter().map(|(s, t)| format!("({s}, {t})")),
        &pb,
    )?;
    insert_all(
        &mut c,
        server,
        "INSERT INTO comments (id, story_id, user_id, parent_id, body) VALUES",
        r.comments.iter().map(|(id, c)| {
            let parent = c.parent_id.map_or("NULL".to_string(), |p| p.to_string());
            format!(
                "({id}, {}, {}, {parent}, {})",
                c.story_id,
                c.user_id,
                lit(&c.body)
            )
        }),
        &pb,
    )?;
    insert_all(
        &mut c,
        server,
        "INSERT INTO votes (story_id, user_id) VALUES",
        r.votes.iter().map(|(s, u)| format!("({s}, {u})")),
        &pb,
    )?;
    insert_all(
        &mut c,
        server,
        "INSERT INTO comment_votes (comment_id, user_id) VALUES",
        r.comment_votes.iter().map(|(s, u)| format!("({s}, {u})")),
        &pb,
    )?;
    pb.finish_and_clear();
    for v in oracle::views() {
        c.batch_execute(&v)
            .map_err(|e| server.explain(anyhow!("{v}: {e}")))?;
    }
    if backend == Backend::Postgres {
        // Statistics and visibility map as a running site would have them,
        // and the load's dirty pages written out before measuring.
        c.batch_execute("VACUUM ANALYZE")?;
        c.batch_execute("CHECKPOINT")?;
    }
    Ok(started.elapsed().as_secs_f64())
}

fn start(backend: Backend, args: &NewsArgs, data: &Data) -> anyhow::Result<Live> {
    let (server, version) = match backend {
        Backend::Aqueduct => {
            let bin = AqueductServer::binary(&args.aqueduct_bin)?;
            eprintln!(
                "starting the Aqueduct server (--fsync {}, 127.0.0.1 only)...",
                args.fsync
            );
            let s = AqueductServer::start(&bin, &args.dir, &args.fsync, args.clients + 12)?;
            let version = s
                .connect()
                .and_then(|mut c| Ok(c.query_one("SHOW server_version", &[])?.get::<_, String>(0)))
                .unwrap_or_else(|e| format!("unknown ({e:#})"));
            (Server::Aqueduct(s), version)
        }
        Backend::Postgres => {
            eprintln!("starting PostgreSQL (initdb in a scratch directory, 127.0.0.1 only)...");
            let s = PgServer::start(&args.pg_bin, &args.dir, args.clients + 2)?;
            let version = s.version.clone();
            (Server::Postgres(s), version)
        }
    };
    let load_seconds = load_data(&server, backend, data)?;
    eprintln!(
        "{}: loaded {} rows in {:.1} s",
        backend.name(),
        thousands(data.rows.total() as u64),
        load_seconds
    );
    let (max_story, max_comment) = (
        data.rows.stories.len() as i64,
        data.rows.comments.len() as i64,
    );
    let shared = Arc::new(Shared {
        next_story: AtomicI64::new(max_story + 1),
        next_comment: AtomicI64::new(max_comment + 1),
        wrong: AtomicU64::new(0),
        wrong_samples: Mutex::new(Vec::new()),
        retries: AtomicU64::new(0),
    });
    let connect = || -> anyhow::Result<Conn> {
        let c = server.connect()?;
        Conn::new(c, shared.clone()).map_err(|e| server.explain(e))
    };
    let checker = connect()?;
    let conns = (0..args.clients)
        .map(|_| connect())
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Live {
        backend,
        server,
        version,
        load_seconds,
        shared,
        conns,
        checker,
    })
}

// ---------------------------------------------------------------------------
// Checks.

/// A page whose answers are checked.
#[derive(Clone, Debug)]
enum CheckPage {
    Front { viewer: i64 },
    Recent { viewer: i64 },
    Story { story: i64, viewer: i64 },
    User { user: i64 },
}

/// One query's answer on one server: (query, parameters, rows).
type Observed = Vec<(Q, Vec<i64>, Rows)>;

/// Runs the read queries of `page` as a page view would (the lists read
/// with the ids the server itself returned).
fn observe(conn: &mut Conn, page: &CheckPage) -> anyhow::Result<Observed> {
    let mut out: Observed = Vec::new();
    let mut run = |q: Q, p: Vec<i64>| -> anyhow::Result<Rows> {
        let rows = conn.read(q, &p)?;
        out.push((q, p, rows.clone()));
        Ok(rows)
    };
    let first_ids = |rows: &Rows| -> Vec<i64> {
        padded(rows.iter().filter_map(|r| match r.first() {
            Some(oracle::Val::Int(id)) => Some(*id),
            _ => None,
        }))
    };
    match *page {
        CheckPage::Front { viewer } => {
            let front = run(Q::Front, vec![])?;
            let ids = first_ids(&front);
            run(Q::TagsOf, ids.clone())?;
            run(Q::CommentCounts, ids.clone())?;
            let mut p = vec![viewer];
            p.extend(ids);
            run(Q::VotedAmong, p)?;
        }
        CheckPage::Recent { viewer } => {
            let recent = run(Q::Recent, vec![])?;
            let ids = first_ids(&recent);
            run(Q::CommentScores, ids.clone())?;
            let mut p = vec![viewer];
            p.extend(ids);
            run(Q::VotedCommentsAmong, p)?;
        }
        CheckPage::Story { story, viewer } => {
            run(Q::Story, vec![story])?;
            run(Q::StoryTags, vec![story])?;
            run(Q::Voted, vec![story, viewer])?;
            run(Q::StoryScore, vec![story])?;
            let comments = run(Q::Comments, vec![story])?;
            run(Q::ViewerCommentVotes, vec![story, viewer])?;
            for c in first_ids(&comments).into_iter().take(3) {
                run(Q::CommentScore, vec![c])?;
                run(Q::CommentVoted, vec![c, viewer])?;
            }
        }
        CheckPage::User { user } => {
            for q in [
                Q::User,
                Q::KarmaStories,
                Q::KarmaComments,
                Q::StoryCount,
                Q::CommentCount,
                Q::UserStories,
                Q::UserComments,
            ] {
                run(q, vec![user])?;
            }
        }
    }
    Ok(out)
}

/// An answer that differs from the oracle's (or the other server's).
#[derive(Serialize, Clone, Debug)]
pub struct Mismatch {
    pub phase: String,
    pub backend: String,
    pub query: String,
    pub params: Vec<i64>,
    pub expected: String,
    pub got: String,
}

/// One check of one server.
#[derive(Serialize, Clone, Debug)]
pub struct CheckReport {
    pub phase: String,
    /// A server, or `aqueduct vs postgres`.
    pub backend: String,
    /// What the answers were compared with.
    pub against: String,
    pub pages: usize,
    pub queries: usize,
    pub mismatches: usize,
    pub seconds: f64,
}

#[derive(Serialize, Clone, Debug, Default)]
pub struct Checks {
    pub reports: Vec<CheckReport>,
    /// Every mismatch counted; the first `MISMATCHES_KEPT` in `mismatches`.
    pub mismatches_total: usize,
    pub mismatches: Vec<Mismatch>,
    /// Pages that failed a check made during the runs (a story just posted
    /// not on its page, a row count that must be one), by server.
    pub wrong_answers_in_runs: BTreeMap<String, u64>,
    pub wrong_answer_samples: Vec<String>,
}

impl Checks {
    fn add(&mut self, m: Mismatch) {
        self.mismatches_total += 1;
        if self.mismatches.len() < MISMATCHES_KEPT {
            self.mismatches.push(m);
        }
    }
}

/// The pages checked: both front pages and recent-comment pages, the most
/// voted stories, popular and random stories (and `extra` ones), the most
/// active and random users. Fixed by `seed`.
fn check_sample(
    snap: &Snapshot,
    sizes: Sizes,
    zipf: f64,
    seed: u64,
    extra: &[i64],
) -> Vec<CheckPage> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x6e65_7773);
    let stories = Ids::new(sizes.stories, zipf);
    let users = Ids::new(sizes.users, zipf);
    let uniform_user = |rng: &mut SmallRng| rng.gen_range(1..=sizes.users as i64);
    let mut pages = vec![
        CheckPage::Front { viewer: 1 },
        CheckPage::Front {
            viewer: uniform_user(&mut rng),
        },
        CheckPage::Recent { viewer: 1 },
        CheckPage::Recent {
            viewer: uniform_user(&mut rng),
        },
    ];
    let mut story_ids: Vec<i64> = snap.ranking().into_iter().take(10).collect();
    story_ids.extend((0..15).map(|_| stories.draw(&mut rng)));
    story_ids.extend((0..15).map(|_| rng.gen_range(1..=sizes.stories as i64)));
    story_ids.extend(extra);
    let mut seen = HashSet::new();
    for story in story_ids {
        if seen.insert(story) {
            let viewer = users.draw(&mut rng);
            pages.push(CheckPage::Story { story, viewer });
        }
    }
    let mut user_ids: Vec<i64> = (1..=5.min(sizes.users as i64)).collect();
    user_ids.extend((0..15).map(|_| users.draw(&mut rng)));
    user_ids.extend((0..15).map(|_| uniform_user(&mut rng)));
    let mut seen = HashSet::new();
    for user in user_ids {
        if seen.insert(user) {
            pages.push(CheckPage::User { user });
        }
    }
    pages
}

/// Checks `live`'s answers for `pages` against `snap`; returns what it saw.
fn check_against(
    live: &mut Live,
    snap: &Snapshot,
    pages: &[CheckPage],
    phase: &str,
    against: &str,
    checks: &mut Checks,
) -> anyhow::Result<Vec<Observed>> {
    let started = Instant::now();
    let mut all = Vec::new();
    let (mut queries, mut mismatches) = (0, 0);
    for page in pages {
        check_stop()?;
        let seen = observe(&mut live.checker, page)
            .map_err(|e| live.server.explain(e.context(format!("checking {page:?}"))))?;
        for (q, p, rows) in &seen {
            queries += 1;
            let expected = snap.answer(*q, p);
            if &expected != rows {
                mismatches += 1;
                checks.add(Mismatch {
                    phase: phase.into(),
                    backend: live.backend.name().into(),
                    query: q.name(),
                    params: p.clone(),
                    expected: oracle::show(&expected, 400),
                    got: oracle::show(rows, 400),
                });
            }
        }
        all.push(seen);
    }
    checks.reports.push(CheckReport {
        phase: phase.into(),
        backend: live.backend.name().into(),
        against: against.into(),
        pages: pages.len(),
        queries,
        mismatches,
        seconds: started.elapsed().as_secs_f64(),
    });
    Ok(all)
}

/// The same pages' answers from two servers, compared.
fn compare_servers(a: &[Observed], b: &[Observed], phase: &str, checks: &mut Checks) {
    let (mut queries, mut mismatches) = (0, 0);
    for (pa, pb) in a.iter().zip(b) {
        for ((q, p, ra), (_, pb_params, rb)) in pa.iter().zip(pb) {
            queries += 1;
            if ra != rb || p != pb_params {
                mismatches += 1;
                checks.add(Mismatch {
                    phase: phase.into(),
                    backend: "aqueduct vs postgres".into(),
                    query: q.name(),
                    params: p.clone(),
                    expected: format!("postgres: {}", oracle::show(rb, 400)),
                    got: format!("aqueduct: {}", oracle::show(ra, 400)),
                });
            }
        }
    }
    checks.reports.push(CheckReport {
        phase: phase.into(),
        backend: "aqueduct vs postgres".into(),
        against: "each other".into(),
        pages: a.len().min(b.len()),
        queries,
        mismatches,
        seconds: 0.0,
    });
}

fn print_checks(checks: &Checks, phase: &str) {
    let rows: Vec<Vec<String>> = checks
        .reports
        .iter()
        .filter(|r| r.phase == phase)
        .map(|r| {
            vec![
                r.backend.clone(),
                r.against.clone(),
                r.pages.to_string(),
                r.queries.to_string(),
                r.mismatches.to_string(),
            ]
        })
        .collect();
    println!();
    println!("check {phase}:");
    print_table(
        &["server", "against", "pages", "queries", "mismatches"],
        &rows,
    );
    for m in checks.mismatches.iter().filter(|m| m.phase == phase) {
        println!(
            "  MISMATCH {} {} {:?}\n    expected {}\n    got      {}",
            m.backend, m.query, m.params, m.expected, m.got
        );
    }
}

// ---------------------------------------------------------------------------
// Runs and results.

#[derive(Serialize, Clone, Debug)]
pub struct RunResult {
    /// `None` in a closed loop.
    pub offered_ops_per_sec: Option<f64>,
    pub outcome: load::Outcome,
    pub cpu: CpuUse,
    /// p95 under the limit and the offered load served.
    pub within_target: bool,
}

#[derive(Serialize, Clone, Debug)]
pub struct BackendResult {
    pub backend: String,
    pub version: String,
    pub load_seconds: f64,
    pub runs: Vec<RunResult>,
    /// The offered loads not run on this server: it had missed the target
    /// at two lower ones in a row.
    pub skipped_offered: Vec<f64>,
    /// Post-story transactions tried again after SQLSTATE 40001, over all
    /// runs (warm-up included).
    pub transaction_retries: u64,
}

#[derive(Serialize, Clone, Debug)]
pub struct DataInfo {
    pub users: u64,
    pub stories: u64,
    pub comments: u64,
    pub votes: u64,
    pub comment_votes: u64,
    pub tags: usize,
    pub taggings: usize,
    pub zipf: f64,
    pub max_comments_per_story: usize,
    /// Skew of the generated data.
    pub most_voted_story_votes: usize,
    pub most_commented_story_comments: usize,
    pub most_active_user_stories: usize,
}

#[derive(Serialize, Clone, Debug)]
pub struct NewsResults {
    pub backends: Vec<BackendResult>,
    /// Per server, the highest offered page views/s whose p95 stayed under
    /// 100 ms with at least 95 % of them served (`null`: none; in a closed
    /// loop, not measured).
    pub max_under_p95: BTreeMap<&'static str, Option<f64>>,
    /// Whether that is the highest load offered (the server might do more).
    pub max_is_highest_offered: BTreeMap<&'static str, bool>,
    /// aqueduct / postgres of `max_under_p95`.
    pub ratio: Option<f64>,
    pub target: &'static str,
    pub data: DataInfo,
    pub p95_limit_ms: f64,
    pub achieved_share: f64,
    pub mode: &'static str,
    pub clients: usize,
    /// Page kinds and their shares.
    pub mix: Vec<(&'static str, f64)>,
    pub queries: Vec<(String, String)>,
    pub writes: Vec<&'static str>,
    pub tables: Vec<&'static str>,
    pub indexes: Vec<&'static str>,
    pub aqueduct_only_indexes: Vec<&'static str>,
    pub views: Vec<String>,
    pub checks: Checks,
    pub load_average_start: [f64; 3],
    pub load_average_end: [f64; 3],
    pub skipped: Vec<(String, String)>,
}

impl NewsResults {
    /// An error when an answer was wrong.
    pub fn verdict(&self) -> anyhow::Result<()> {
        let wrong: u64 = self.checks.wrong_answers_in_runs.values().sum();
        if self.checks.mismatches_total > 0 || wrong > 0 {
            bail!(
                "wrong answers: {} mismatches in the checks, {wrong} pages with a wrong answer during the runs",
                self.checks.mismatches_total
            );
        }
        Ok(())
    }
}

fn within_target(o: &load::Outcome) -> bool {
    match o.offered_ops_per_sec {
        Some(offered) => {
            o.all.ops > 0
                && o.all.latency.p95_ms < P95_LIMIT_MS
                && o.achieved_ops_per_sec >= ACHIEVED_SHARE * offered
        }
        None => false,
    }
}

/// One measured run of `live` in `mode`.
fn run_one(
    live: &mut Live,
    mode: Mode,
    args: &NewsArgs,
    draws: &Draws,
    seed: u64,
) -> anyhow::Result<RunResult> {
    let schedule = Schedule {
        mode,
        clients: args.clients,
        warmup: Duration::from_secs_f64(args.warmup),
        measure: Duration::from_secs_f64(args.seconds),
    };
    let label = match mode {
        Mode::Open { ops_per_sec } => format!("{} @ {ops_per_sec} pages/s", live.backend.name()),
        Mode::Closed => format!("{} closed loop", live.backend.name()),
    };
    let _watchdog = common::Watchdog::new(
        schedule.warmup + schedule.measure + Duration::from_secs(120),
        label.clone(),
    );
    let pb = common::progress(
        schedule.measure.as_millis() as u64,
        "{spinner} {prefix} [{elapsed_precise}] [{bar:30}] {msg}",
    );
    pb.set_prefix(label);
    let pid = live.server.pid();
    let clients = &mut live.conns[..];
    let warmup = schedule.warmup;
    let (outcome, cpu) = std::thread::scope(|s| {
        // The CPU counters are read when the measured window opens.
        let at_window = s.spawn(move || {
            common::nap(warmup + Duration::from_millis(20));
            cpu::sample(pid)
        });
        let outcome = load::run(
            &KINDS,
            &schedule,
            clients,
            seed,
            |rng| draws.draw(rng),
            |c: &mut Conn, page: &Page| c.page(page),
            &pb,
        );
        let end = cpu::sample(pid);
        let begin = at_window.join().expect("the CPU sampler panicked");
        (outcome, CpuUse::between(&begin, &end))
    });
    pb.finish_and_clear();
    check_stop()?;
    Ok(RunResult {
        offered_ops_per_sec: outcome.offered_ops_per_sec,
        within_target: within_target(&outcome),
        outcome,
        cpu,
    })
}

fn short(kind: &str) -> &str {
    match kind {
        "front_page" => "front",
        "recent_comments" => "recent",
        "vote_story" => "vote s",
        "vote_comment" => "vote c",
        "post_comment" => "post c",
        "post_story" => "post s",
        other => other,
    }
}

fn print_point(title: &str, runs: &[(&str, &RunResult)]) {
    println!();
    println!("{title}");
    print_runs(runs);
    let mut headers = vec!["p95 ms by page"];
    headers.extend(KINDS.iter().map(|k| short(k)));
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|(name, r)| {
            let mut row = vec![name.to_string()];
            for k in KINDS {
                row.push(
                    r.outcome
                        .kind(k)
                        .filter(|k| k.ops > 0)
                        .map_or("-".into(), |k| ms(k.latency.p95_ms)),
                );
            }
            row
        })
        .collect();
    print_table(&headers, &rows);
    for (name, r) in runs {
        for e in &r.outcome.error_samples {
            println!("  {name} error: {e}");
        }
    }
}

fn loadavg_text(l: [f64; 3]) -> String {
    format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2])
}

/// The check after loading: every server against the generated data, and
/// the servers against each other.
fn check_after_load(
    lives: &mut [Live],
    generated: &Snapshot,
    sizes: Sizes,
    args: &NewsArgs,
    checks: &mut Checks,
) -> anyhow::Result<()> {
    let _watchdog =
        common::Watchdog::new(Duration::from_secs(600), "the check after loading".into());
    let sample = check_sample(generated, sizes, args.zipf, args.seed, &[]);
    let mut seen = Vec::new();
    for live in lives.iter_mut() {
        let s = check_against(
            live,
            generated,
            &sample,
            "after load",
            "the generated data",
            checks,
        )?;
        seen.push((live.backend, s));
    }
    if let [(Backend::Aqueduct, a), (Backend::Postgres, p)]
    | [(Backend::Postgres, p), (Backend::Aqueduct, a)] = &seen[..]
    {
        compare_servers(a, p, "after load", checks);
    }
    Ok(())
}

/// The check at the end: every server against a dump of its own tables,
/// with the newest stories (posted during the runs) and the stories of the
/// newest comments added to the sample.
fn check_at_end(
    lives: &mut [Live],
    sizes: Sizes,
    args: &NewsArgs,
    checks: &mut Checks,
) -> anyhow::Result<()> {
    let _watchdog = common::Watchdog::new(Duration::from_secs(600), "the check at the end".into());
    for live in lives.iter_mut() {
        let dumped = TableRows::dump(&mut live.checker.client)
            .map_err(|e| live.server.explain(e.context("dumping the tables")))?;
        let snap = Snapshot::new(&dumped);
        let (max_story, _) = snap.max_ids();
        let mut extra: Vec<i64> =
            ((max_story - 4).max(args.stories as i64 + 1)..=max_story).collect();
        let newest = snap.answer(Q::Recent, &[]);
        extra.extend(newest.iter().take(5).filter_map(|r| match r.get(1) {
            Some(oracle::Val::Int(s)) => Some(*s),
            _ => None,
        }));
        let sample = check_sample(&snap, sizes, args.zipf, args.seed, &extra);
        check_against(live, &snap, &sample, "at end", "its own tables", checks)?;
    }
    Ok(())
}

/// Runs every offered load (or the closed loop) on every server, the order
/// of the servers alternating from load to load.
fn sweep(
    lives: &mut [Live],
    results: &mut [BackendResult],
    args: &NewsArgs,
    draws: &Draws,
) -> anyhow::Result<()> {
    let points: Vec<Mode> = if args.closed {
        vec![Mode::Closed]
    } else {
        let mut offered = args.target_ops.clone();
        offered.sort_by(f64::total_cmp);
        offered.dedup();
        offered
            .into_iter()
            .map(|ops_per_sec| Mode::Open { ops_per_sec })
            .collect()
    };
    let n = lives.len();
    let mut misses = vec![0usize; n];
    for (i, mode) in points.iter().enumerate() {
        let mut done: Vec<usize> = Vec::new();
        for j in 0..n {
            check_stop()?;
            let li = (i + j) % n;
            if !args.all_points && misses[li] >= 2 {
                if let Mode::Open { ops_per_sec } = mode {
                    results[li].skipped_offered.push(*ops_per_sec);
                }
                continue;
            }
            let seed = args.seed ^ ((i as u64 + 1) << 32);
            let r = run_one(&mut lives[li], *mode, args, draws, seed)
                .map_err(|e| lives[li].server.explain(e))?;
            misses[li] = if r.within_target { 0 } else { misses[li] + 1 };
            results[li].runs.push(r);
            done.push(li);
        }
        if done.is_empty() {
            continue;
        }
        let title = match mode {
            Mode::Open { ops_per_sec } => format!(
                "offered {ops_per_sec} page views/s ({} clients, open loop, {} s measured):",
                args.clients, args.seconds
            ),
            Mode::Closed => format!(
                "closed loop ({} clients, {} s measured):",
                args.clients, args.seconds
            ),
        };
        done.sort_unstable();
        let runs: Vec<(&str, &RunResult)> = done
            .iter()
            .map(|&li| {
                (
                    lives[li].backend.name(),
                    results[li].runs.last().expect("just run"),
                )
            })
            .collect();
        print_point(&title, &runs);
    }
    Ok(())
}

/// Per server, the highest offered load within the target and whether it
/// was the highest offered; and the ratio aqueduct / postgres.
struct Metric {
    max_under_p95: BTreeMap<&'static str, Option<f64>>,
    highest_offered: BTreeMap<&'static str, bool>,
    ratio: Option<f64>,
}

fn metric(results: &[BackendResult], args: &NewsArgs) -> Metric {
    let mut max_under_p95 = BTreeMap::new();
    let mut highest_offered = BTreeMap::new();
    let highest = args.target_ops.iter().copied().fold(0.0, f64::max);
    for b in results {
        let name = if b.backend == Backend::Aqueduct.name() {
            Backend::Aqueduct.name()
        } else {
            Backend::Postgres.name()
        };
        let best = b
            .runs
            .iter()
            .filter(|r| r.within_target)
            .filter_map(|r| r.offered_ops_per_sec)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
        max_under_p95.insert(name, best);
        highest_offered.insert(name, best == Some(highest));
    }
    let ratio = match (
        max_under_p95.get("aqueduct").copied().flatten(),
        max_under_p95.get("postgres").copied().flatten(),
    ) {
        (Some(a), Some(p)) if p > 0.0 => Some(a / p),
        _ => None,
    };
    Metric {
        max_under_p95,
        highest_offered,
        ratio,
    }
}

/// One line per run: load, latency, errors and CPU.
fn print_runs(runs: &[(&str, &RunResult)]) {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|(name, r)| {
            let o = &r.outcome;
            vec![
                name.to_string(),
                o.offered_ops_per_sec
                    .map_or("closed".into(), |x| format!("{x:.0}")),
                format!("{:.1}", o.achieved_ops_per_sec),
                ms(o.all.latency.p50_ms),
                ms(o.all.latency.p95_ms),
                ms(o.all.latency.p99_ms),
                ms(o.all.latency.max_ms),
                o.errors.to_string(),
                o.not_started.to_string(),
                format!("{:.2}", r.cpu.server_cores),
                format!("{:.2}", r.cpu.bench_cores),
                format!("{:.2}", r.cpu.other_cores),
                if o.offered_ops_per_sec.is_none() {
                    "-".into()
                } else if r.within_target {
                    "yes".into()
                } else {
                    "no".into()
                },
            ]
        })
        .collect();
    print_table(
        &[
            "server",
            "offered/s",
            "pages/s",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "max ms",
            "errors",
            "not started",
            "server cores",
            "client cores",
            "other cores",
            "p95<100ms",
        ],
        &rows,
    );
}

fn print_summary(r: &NewsResults, args: &NewsArgs) {
    println!();
    println!(
        "news: {} users, {} stories, {} comments, {} story votes, {} comment votes, zipf {}; {} clients, {} s per run (+{} s warm-up)",
        thousands(args.users),
        thousands(args.stories),
        thousands(args.comments),
        thousands(args.votes),
        thousands(args.comment_votes),
        args.zipf,
        args.clients,
        args.seconds,
        args.warmup
    );
    let runs: Vec<(&str, &RunResult)> = r
        .backends
        .iter()
        .flat_map(|b| b.runs.iter().map(move |run| (b.backend.as_str(), run)))
        .collect();
    print_runs(&runs);
    for b in &r.backends {
        if b.transaction_retries > 0 {
            println!(
                "{}: {} post-story transactions tried again after SQLSTATE 40001 (serialization failure)",
                b.backend, b.transaction_retries
            );
        }
        if !b.skipped_offered.is_empty() {
            println!(
                "{}: not run at {:?} page views/s (missed the target at two lower loads in a row)",
                b.backend, b.skipped_offered
            );
        }
    }
    if !args.closed {
        for (name, best) in &r.max_under_p95 {
            let bound = if r.max_is_highest_offered[name] {
                " (the highest offered: it may do more)"
            } else {
                ""
            };
            match best {
                Some(x) => {
                    println!("{name}: {x:.0} page views/s with p95 < {P95_LIMIT_MS:.0} ms{bound}")
                }
                None => println!(
                    "{name}: no offered load met p95 < {P95_LIMIT_MS:.0} ms with {:.0} % served",
                    ACHIEVED_SHARE * 100.0
                ),
            }
        }
        if let Some(ratio) = r.ratio {
            println!("aqueduct / postgres: {ratio:.2}x (target: at least 5x)");
        }
    }
    let wrong: u64 = r.checks.wrong_answers_in_runs.values().sum();
    println!(
        "checks: {} mismatches; {wrong} wrong answers during the runs",
        r.checks.mismatches_total
    );
    for s in &r.checks.wrong_answer_samples {
        println!("  wrong answer {s}");
    }
    println!(
        "load average: {} at start, {} at end (\"other cores\": CPU busy outside the server and this client)",
        loadavg_text(r.load_average_start),
        loadavg_text(r.load_average_end)
    );
}

pub fn run(args: &NewsArgs) -> anyhow::Result<NewsResults> {
    ensure!(
        args.clients > 0 && args.seconds > 0.0 && args.warmup >= 0.0,
        "--clients and --seconds must be > 0"
    );
    ensure!(
        args.closed || args.target_ops.iter().all(|x| *x > 0.0) && !args.target_ops.is_empty(),
        "--target-ops must list offered page views per second, each > 0"
    );
    let load_average_start = cpu::loadavg();
    eprintln!(
        "load average at start: {} ({} cores)",
        loadavg_text(load_average_start),
        common::machine().cores
    );
    let sizes = Sizes {
        users: args.users,
        stories: args.stories,
        comments: args.comments,
        votes: args.votes,
        comment_votes: args.comment_votes,
    };
    let started = Instant::now();
    let data = generate(sizes, args.zipf, args.seed)?;
    let generated = Snapshot::new(&data.rows);
    eprintln!(
        "generated {} rows in {:.1} s",
        thousands(data.rows.total() as u64),
        started.elapsed().as_secs_f64()
    );

    let mut backends: Vec<Backend> = Vec::new();
    for b in &args.backends {
        if !backends.contains(b) {
            backends.push(*b);
        }
    }
    let mut skipped = Vec::new();
    let mut lives: Vec<Live> = Vec::new();
    for b in backends {
        if b == Backend::Postgres {
            if let Some(why) = PgServer::unavailable(&args.pg_bin) {
                eprintln!("skipping postgres: {why}");
                skipped.push(("postgres".to_string(), why));
                continue;
            }
        }
        lives.push(start(b, args, &data)?);
    }
    ensure!(!lives.is_empty(), "no server to measure");

    let mut checks = Checks::default();
    check_after_load(&mut lives, &generated, sizes, args, &mut checks)?;
    print_checks(&checks, "after load");
    let mut results: Vec<BackendResult> = lives
        .iter()
        .map(|l| BackendResult {
            backend: l.backend.name().into(),
            version: l.version.clone(),
            load_seconds: l.load_seconds,
            runs: Vec::new(),
            skipped_offered: Vec::new(),
            transaction_retries: 0,
        })
        .collect();
    if checks.mismatches_total > 0 {
        eprintln!("the answers after loading are wrong: no runs");
    } else {
        sweep(
            &mut lives,
            &mut results,
            args,
            &Draws::new(&data, args.zipf),
        )?;
        check_at_end(&mut lives, sizes, args, &mut checks)?;
        print_checks(&checks, "at end");
    }
    for (live, r) in lives.iter().zip(results.iter_mut()) {
        r.transaction_retries = live.shared.retries.load(Ordering::Relaxed);
        let name = live.backend.name();
        let wrong = live.shared.wrong.load(Ordering::Relaxed);
        checks.wrong_answers_in_runs.insert(name.into(), wrong);
        let samples = live.shared.wrong_samples.lock().expect("not poisoned");
        for s in samples.iter() {
            if checks.wrong_answer_samples.len() < MISMATCHES_KEPT {
                checks.wrong_answer_samples.push(format!("{name}: {s}"));
            }
        }
    }
    let load_average_end = cpu::loadavg();
    drop(lives);

    let Metric {
        max_under_p95,
        highest_offered: max_is_highest_offered,
        ratio,
    } = metric(&results, args);
    let total: u32 = MIX.iter().sum();
    let out = NewsResults {
        backends: results,
        max_under_p95,
        max_is_highest_offered,
        ratio,
        target: "aqueduct at least 5x the page views/s of postgres with p95 < 100 ms (reported, not asserted)",
        data: describe(&data, sizes, args.zipf, &generated),
        p95_limit_ms: P95_LIMIT_MS,
        achieved_share: ACHIEVED_SHARE,
        mode: if args.closed { "closed" } else { "open" },
        clients: args.clients,
        mix: KINDS
            .iter()
            .zip(MIX)
            .map(|(k, m)| (*k, m as f64 / total as f64))
            .collect(),
        queries: Q::ALL.iter().map(|q| (q.name(), q.sql())).collect(),
        writes: vec![
            W_VOTE,
            W_UNVOTE,
            W_COMMENT_VOTE,
            W_COMMENT_UNVOTE,
            W_INSERT_STORY,
            W_INSERT_TAGGING,
            W_INSERT_COMMENT,
        ],
        tables: oracle::TABLES.to_vec(),
        indexes: oracle::INDEXES.to_vec(),
        aqueduct_only_indexes: oracle::AQUEDUCT_INDEXES.to_vec(),
        views: oracle::views().to_vec(),
        checks,
        load_average_start,
        load_average_end,
        skipped,
    };
    print_summary(&out, args);
    Ok(out)
}

fn describe(data: &Data, sizes: Sizes, zipf: f64, snap: &Snapshot) -> DataInfo {
    let mut authored = vec![0usize; sizes.users as usize];
    for (_, s) in &data.rows.stories {
        authored[s.user_id as usize - 1] += 1;
    }
    DataInfo {
        users: sizes.users,
        stories: sizes.stories,
        comments: sizes.comments,
        votes: sizes.votes,
        comment_votes: sizes.comment_votes,
        tags: data.rows.tags.len(),
        taggings: data.rows.taggings.len(),
        zipf,
        max_comments_per_story: MAX_COMMENTS_PER_STORY,
        most_voted_story_votes: snap.ranking().first().map_or(0, |s| snap.story_score(*s)),
        most_commented_story_comments: data
            .comments_of_story
            .iter()
            .map(|c| c.len())
            .max()
            .unwrap_or(0),
        most_active_user_stories: authored.into_iter().max().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Sizes = Sizes {
        users: 200,
        stories: 1000,
        comments: 3000,
        votes: 8000,
        comment_votes: 5000,
    };

    #[test]
    fn the_generator_makes_the_sizes_asked_for_with_valid_keys() {
        let d = generate(SMALL, 1.15, 7).unwrap();
        let r = &d.rows;
        assert_eq!(r.users.len(), 200);
        assert_eq!(r.stories.len(), 1000);
        assert_eq!(r.comments.len(), 3000);
        assert_eq!(r.votes.len(), 8000);
        assert_eq!(r.comment_votes.len(), 5000);
        assert_eq!(r.tags.len(), TAGS.len());
        // Every story has one to three distinct tags.
        let mut per_story = vec![0; 1000];
        let taggings: HashSet<_> = r.taggings.iter().collect();
        assert_eq!(taggings.len(), r.taggings.len());
        for (s, t) in &r.taggings {
            per_story[*s as usize - 1] += 1;
            assert!((1..=TAGS.len() as i64).contains(t));
        }
        assert!(per_story.iter().all(|n| (1..=3).contains(n)));
        // Primary keys are unique; references point at existing rows.
        let votes: HashSet<_> = r.votes.iter().collect();
        assert_eq!(votes.len(), r.votes.len());
        let comment_votes: HashSet<_> = r.comment_votes.iter().collect();
        assert_eq!(comment_votes.len(), r.comment_votes.len());
        for (s, u) in &r.votes {
            assert!((1..=1000).contains(s) && (1..=200).contains(u));
        }
        for (c, u) in &r.comment_votes {
            assert!((1..=3000).contains(c) && (1..=200).contains(u));
        }
        for (id, c) in &r.comments {
            assert!((1..=1000).contains(&c.story_id) && (1..=200).contains(&c.user_id));
            if let Some(p) = c.parent_id {
                // A reply answers an earlier comment on the same story.
                assert!(p < *id);
                assert_eq!(r.comments[p as usize - 1].1.story_id, c.story_id);
            }
        }
        assert!(d
            .comments_of_story
            .iter()
            .all(|c| c.len() <= MAX_COMMENTS_PER_STORY));
    }

    #[test]
    fn the_generator_is_skewed() {
        let d = generate(SMALL, 1.15, 7).unwrap();
        let snap = Snapshot::new(&d.rows);
        let mut scores: Vec<usize> = (1..=1000).map(|s| snap.story_score(s)).collect();
        // Story 1 is the most popular: far above the median story.
        let first = scores[0];
        scores.sort_unstable();
        let median = scores[500];
        assert!(
            first > 20 * median.max(1),
            "story 1: {first}, median {median}"
        );
        // The top 1 % of stories get a large share of the votes (uniform
        // votes would give them 1 %; each has at most 200 voters here).
        let top: usize = scores.iter().rev().take(10).sum();
        assert!(top * 10 > 8000, "top 10 stories: {top} of 8000 votes");
        // User 1 writes far more stories than the average user (5).
        let by_user_1 = d
            .rows
            .stories
            .iter()
            .filter(|(_, s)| s.user_id == 1)
            .count();
        assert!(by_user_1 > 50, "user 1 wrote {by_user_1} stories");
        // Comments follow stories, up to the cap.
        assert_eq!(d.comments_of_story[0].len(), MAX_COMMENTS_PER_STORY);
        // Uniform: no such skew.
        let flat = generate(SMALL, 0.0, 7).unwrap();
        let by_user_1 = flat
            .rows
            .stories
            .iter()
            .filter(|(_, s)| s.user_id == 1)
            .count();
        assert!(by_user_1 < 20, "uniform: user 1 wrote {by_user_1} stories");
    }

    #[test]
    fn the_generator_is_fixed_by_its_seed() {
        let a = generate(SMALL, 1.15, 3).unwrap();
        let b = generate(SMALL, 1.15, 3).unwrap();
        let c = generate(SMALL, 1.15, 4).unwrap();
        assert_eq!(a.rows.stories, b.rows.stories);
        assert_eq!(a.rows.comments, b.rows.comments);
        assert_eq!(a.rows.votes, b.rows.votes);
        assert_eq!(a.rows.comment_votes, b.rows.comment_votes);
        assert_eq!(a.rows.taggings, b.rows.taggings);
        assert_ne!(a.rows.votes, c.rows.votes);
        assert_ne!(a.rows.stories, c.rows.stories);
    }

    #[test]
    fn too_many_votes_for_the_data_are_refused() {
        let mut s = SMALL;
        s.votes = s.stories * s.users;
        assert!(generate(s, 1.15, 1).is_err());
    }

    #[test]
    fn draws_follow_the_mix() {
        let d = generate(SMALL, 1.15, 7).unwrap();
        let draws = Draws::new(&d, 1.15);
        let mut rng = SmallRng::seed_from_u64(9);
        let mut counts = [0usize; KINDS.len()];
        for _ in 0..20_000 {
            let (k, page) = draws.draw(&mut rng);
            counts[k] += 1;
            if let Page::VoteComment { comment, .. } = page {
                assert!((1..=3000).contains(&comment));
            }
        }
        for (k, m) in MIX.iter().enumerate() {
            let expected = 20 * *m as usize;
            let diff = counts[k].abs_diff(expected);
            assert!(
                diff < expected / 5 + 30,
                "{}: {} of 20,000",
                KINDS[k],
                counts[k]
            );
        }
    }
}
