-- The other half of a friendship, on the friend's shard: a new row and a
-- counter, which commute with every other befriending.
CREATE CHAIN befriend_back (a bigint, b bigint) AS $$
  HOP ON $a COMMUTATIVE;
    INSERT INTO friendships VALUES ($a, $b);
    UPDATE users SET friends = friends + 1 WHERE id = $a;
$$;

-- Befriend: the acting user's half first (the user sees it at once), then
-- the linked chain writes the friend's half, started once this commits.
CREATE CHAIN befriend (a bigint, b bigint) AS $$
  HOP ON $a COMMUTATIVE;
    INSERT INTO friendships VALUES ($a, $b);
    UPDATE users SET friends = friends + 1 WHERE id = $a;
  THEN CALL befriend_back($b, $a);
$$;

CREATE CHAIN post_status (id bigint, author bigint, body text) AS $$
  HOP ON $author COMMUTATIVE;
    INSERT INTO statuses VALUES ($id, $author, $body);
$$;

-- Friends' activity: one hop reading the join view.
CREATE CHAIN activity (viewer bigint) AS $$
  HOP ON $viewer;
    SELECT count(*) INTO seen FROM friends_activity WHERE viewer = $viewer;
$$;
