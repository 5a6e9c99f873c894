-- An auction site after RUBiS (Lynx §8, L-RUBiS): users with unique
-- usernames, items, and bids. A user's rows live on the user's shard, an
-- item's on the item's, a username's on the name's.
CREATE TABLE usernames (name text PRIMARY KEY, user_id bigint NOT NULL) WITH (shard_key = 'name');
CREATE TABLE users (id bigint PRIMARY KEY, name text NOT NULL, bids integer NOT NULL DEFAULT 0) WITH (shard_key = 'id');
CREATE TABLE items (id bigint PRIMARY KEY, title text NOT NULL, bids integer NOT NULL DEFAULT 0, max_bid numeric NOT NULL DEFAULT 0) WITH (shard_key = 'id');
CREATE TABLE bids (id bigint PRIMARY KEY, item bigint NOT NULL, bidder bigint NOT NULL, amount numeric NOT NULL) WITH (shard_key = 'item');
-- Browsing reads a maintained view: the analysis treats it as a table
-- derived from bids.
CREATE VIEW item_bids AS SELECT item, count(*) AS n, max(amount) AS top FROM bids GROUP BY item;
