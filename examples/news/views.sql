-- The maintained views of the news aggregator. Aqueduct compiles each into
-- dataflow operators and keeps it up to date on every commit; a read is a
-- lookup in the view, not a query over the base tables.
--
-- news.py creates StoryWithVotes before it loads any data (the load then
-- flows through the dataflow) and the other two afterwards (they are filled
-- from the data already there), as an application adds queries over time.

-- Each story with its number of votes: the paper's example (Figure 1a).
-- The LEFT JOIN keeps stories nobody has voted for yet, with 0 votes.
CREATE VIEW StoryWithVotes AS
SELECT stories.id, stories.author, stories.title, stories.url,
       COALESCE(vc.votes, 0) AS votes
FROM stories
LEFT JOIN (SELECT story_id, count(*) AS votes FROM votes GROUP BY story_id) AS vc
       ON stories.id = vc.story_id;

-- Each user's karma: the votes on all the stories the user wrote (Figure 1b).
-- The vote count is written exactly as in StoryWithVotes, so the dataflow
-- shares it: Karma adds a join and a sum below the existing count instead of
-- counting every vote again (EXPLAIN shows the shared nodes). Users who
-- wrote nothing, or got no votes, have karma 0.
CREATE VIEW Karma AS
SELECT users.id, users.name, CAST(COALESCE(k.karma, 0) AS bigint) AS karma
FROM users
LEFT JOIN (SELECT stories.author, sum(vc.votes) AS karma
           FROM stories
           JOIN (SELECT story_id, count(*) AS votes FROM votes GROUP BY story_id) AS vc
             ON stories.id = vc.story_id
           GROUP BY stories.author) AS k
       ON users.id = k.author;

-- The front page: the ten stories with the most votes (the newest first among
-- equals), with their comment counts. ORDER BY ... LIMIT becomes a top-k
-- operator: a vote far below the front page changes nothing here.
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
