-- Reference data of a TV guide: titles, their seasons and episodes, and
-- what airs when on which channel. The publisher writes it; applications
-- mirror it in process (crates/mirror/examples/reference_data.rs).

CREATE TABLE titles (
    id   bigint PRIMARY KEY,
    name text NOT NULL,
    kind text NOT NULL,          -- 'series' or 'film'
    year integer
);

CREATE TABLE seasons (
    title_id bigint NOT NULL,    -- titles.id
    number   integer NOT NULL,
    year     integer,
    PRIMARY KEY (title_id, number)
);

CREATE TABLE episodes (
    id          bigint PRIMARY KEY,
    title_id    bigint NOT NULL, -- titles.id
    season      integer NOT NULL,
    number      integer NOT NULL,
    name        text NOT NULL,
    runtime_min integer
);

CREATE TABLE schedules (
    channel    text NOT NULL,
    starts_at  timestamptz NOT NULL,
    episode_id bigint NOT NULL,  -- episodes.id
    PRIMARY KEY (channel, starts_at)
);
