-- A social network after Lynx' L-Social: users, symmetric friendships kept
-- as two rows (one on each user's shard), statuses, and friends' activity
-- as a maintained join view.
CREATE TABLE users (id bigint PRIMARY KEY, name text NOT NULL, friends integer NOT NULL DEFAULT 0) WITH (shard_key = 'id');
CREATE TABLE friendships (a bigint NOT NULL, b bigint NOT NULL, PRIMARY KEY (a, b)) WITH (shard_key = 'a');
CREATE TABLE statuses (id bigint PRIMARY KEY, author bigint NOT NULL, body text NOT NULL) WITH (shard_key = 'author');
CREATE VIEW friends_activity AS
  SELECT f.a AS viewer, s.id, s.author, s.body
  FROM friendships f JOIN statuses s ON s.author = f.b;
