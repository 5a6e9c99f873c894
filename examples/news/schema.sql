-- The news aggregator's base tables (a small Lobsters / Hacker News).
--
-- Aqueduct has no `serial`: the application picks the keys (news.py counts
-- them up). A vote is one row per (story, user), so a user votes at most once
-- per story; taking a vote back deletes the row.

CREATE TABLE users (
    id   bigint PRIMARY KEY,
    name text NOT NULL UNIQUE
);

CREATE TABLE stories (
    id     bigint PRIMARY KEY,
    author bigint NOT NULL,      -- users.id
    title  text NOT NULL,
    url    text                  -- NULL for a text post ("Ask: ...")
);

CREATE TABLE votes (
    story_id bigint NOT NULL,    -- stories.id
    user_id  bigint NOT NULL,    -- users.id
    PRIMARY KEY (story_id, user_id)
);

CREATE TABLE comments (
    id       bigint PRIMARY KEY,
    story_id bigint NOT NULL,    -- stories.id
    author   bigint NOT NULL,    -- users.id
    body     text NOT NULL
);

-- Secondary indexes for the direct (non-view) reads: a story's comments, a
-- story's votes, a user's votes. (votes_by_story repeats the first column of
-- the primary key: a lookup by a prefix of the key is a scan today.)
CREATE INDEX comments_by_story ON comments (story_id);
CREATE INDEX votes_by_story ON votes (story_id);
CREATE INDEX votes_by_user ON votes (user_id);
