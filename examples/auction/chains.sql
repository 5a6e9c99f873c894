-- Register a user: the name is claimed on its own shard first, and a taken
-- name aborts the chain before anything is written (only a first hop may
-- abort). The user's row follows; creating a user commutes with counting
-- another user's bids.
CREATE CHAIN register_user (id bigint, name text) AS $$
  HOP ON $name;
    ABORT IF (SELECT count(*) > 0 FROM usernames WHERE name = $name);
    INSERT INTO usernames VALUES ($name, $id);
  HOP ON $id COMMUTATIVE COMMUTES WITH place_bid.1;
    INSERT INTO users (id, name) VALUES ($id, $name);
$$;

-- Place a bid: the bidder's own count first, so the user sees it at once;
-- then the item's bids and highest bid. Both are increments and inserts of
-- new rows, which commute.
CREATE CHAIN place_bid (id bigint, bidder bigint, item bigint, amount numeric) AS $$
  HOP ON $bidder COMMUTATIVE;
    UPDATE users SET bids = bids + 1 WHERE id = $bidder;
  HOP ON $item COMMUTATIVE;
    INSERT INTO bids VALUES ($id, $item, $bidder, $amount);
    UPDATE items SET bids = bids + 1, max_bid = greatest(max_bid, $amount) WHERE id = $item;
$$;

-- Browse an item: one hop reading the maintained view.
CREATE CHAIN view_item (item bigint) AS $$
  HOP ON $item;
    SELECT n, top INTO n, top FROM item_bids WHERE item = $item;
$$;
