-- The bill projector's pending sweep (issue 6 item 9); see migrations/mysql/0017 for
-- the meaning of each column.
CREATE TABLE bill_projection_sweep (
    name TEXT NOT NULL,
    last_station_id INTEGER NULL,
    last_month TEXT NULL,
    marked_position INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (name)
);
