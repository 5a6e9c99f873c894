-- The maintained views of the news aggregator. Aqueduct compiles each into
-- dataflow operators and keeps it up to date on every commit; a read is a
-- lookup in the view, not a query over the base tables.
--
-- news.py creates StoryWithVotes before it loads any data (the load then
-- flows through the dataflow) and the other two afterwards (they are filled
-- from the data already there), as an application adds queries over time.
-- Karma reads StoryWithVotes, so it comes after it (and goes first when
-- they are dropped).

-- Each story with its number of votes: the paper's example (Figure 1a).
-- The LEFT JOIN keeps stories nobody has voted for yet, with 0 votes.
CREATE VIEW StoryWithVotes AS
SELECT stories.id, stories.author, stories.title, stories.url,
       COALESCE(vc.votes, 0) AS votes
FROM stories
LEFT JOIN (SELECT story_id, count(*) AS votes FROM votes GROUP BY story_id) AS vc
       ON stories.id = vc.story_id;

-- Each user's karma: the votes on all the stories the user wrote (Figure 1b).
-- Karma reads StoryWithVotes, as in the paper, so the dataflow does not
-- count the votes again: it adds a sum by author and a join with users
-- below the operators StoryWithVotes already keeps (EXPLAIN shows the
-- shared nodes). Users who wrote nothing, or got no votes, have karma 0.
CREATE VIEW Karma AS
SELECT users.id, users.name, CAST(COALESCE(k.karma, 0) AS bigint) AS karma
FROM users
LEFT JOIN (SELECT author, sum(votes) AS karma FROM StoryWithVotes GROUP BY author) AS k
       ON users.id = k.author;

-- The front page: the ten stories with the most votes (the newest first among
-- equals), with their comment counts. ORDER BY ... LIMIT becomes a top-k
-- operator: a vote far below the front page changes nothing here. The vote
-- count is written out rather than read from StoryWithVotes; it is the same
-- subquery, so the dataflow finds it and shares the join of stories with it
-- instead of building a second one.
CREATE VIEW FrontPage AS
SELECT stories.id, stories.title,
       COALESCE(vc.votes, 0) AS votes,
       COALESCE(cc.comments, 0) AS comments
FROM stories
LEFT JOIN (SELECT story_id, count(*) AS votes FROM votes GROUP BY story_id) AS vc
       ON stories.id = vc.story_id
LEFT JOIN (SELECT story_id, count(*) AS comments FROM comments GROUP BY story_id) AS cc
       ON stories.id = cc.story_id
ORDER BY votes DESC, stories.id DESC
LIMIT 10;
