-- The feed example's tables, the same in Aqueduct and in PostgreSQL.
--
-- The application picks the keys: tweet ids count up in the order the tweets
-- are written, so "newest" is "largest id". A retweet is a tweet of its own
-- (by the user who retweets) with retweet_of = the original tweet's id.
-- Following is one row per (follower, followee); unfollowing deletes it.

CREATE TABLE users (
    id   bigint PRIMARY KEY,
    name text NOT NULL
);

CREATE TABLE follows (
    follower bigint NOT NULL,    -- users.id: whose timeline
    followee bigint NOT NULL,    -- users.id: whose tweets it shows
    PRIMARY KEY (follower, followee)
);

CREATE TABLE tweets (
    id         bigint PRIMARY KEY,
    author     bigint NOT NULL,  -- users.id
    body       text NOT NULL,
    retweet_of bigint            -- tweets.id of the original, NULL for a tweet
);

-- An author's tweets newest first: PostgreSQL answers the timeline query
-- with the follows primary key (the follower's followees) and, for each
-- followee, this index read backwards.
CREATE INDEX tweets_author_id ON tweets (author, id);
