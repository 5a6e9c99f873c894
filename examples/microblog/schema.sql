-- A microblog after Lynx' L-Twitter: users with follower counts, follows,
-- tweets, and each reader's timeline as a maintained join view (the
-- paper's GraphTweets join table, kept by the dataflow here).
CREATE TABLE users (id bigint PRIMARY KEY, name text NOT NULL, following integer NOT NULL DEFAULT 0, followers integer NOT NULL DEFAULT 0) WITH (shard_key = 'id');
CREATE TABLE follows (follower bigint NOT NULL, followee bigint NOT NULL, PRIMARY KEY (follower, followee)) WITH (shard_key = 'follower');
CREATE TABLE tweets (id bigint PRIMARY KEY, author bigint NOT NULL, body text NOT NULL) WITH (shard_key = 'author');
CREATE VIEW timeline AS
  SELECT f.follower AS reader, t.id, t.author, t.body
  FROM follows f JOIN tweets t ON t.author = f.followee;
