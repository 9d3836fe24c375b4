-- bill_projection_sweep: the bill projector's pending sweep (issue 6 item 9). A
-- catch-up far behind the head folds fact events without recomputing station-months
-- and, in the same transaction as the checkpoint, leaves this row with its cursor
-- reset. Back at the head the projector recomputes every station-month after
-- (last_station_id, last_month) in chunks, each chunk in its own transaction moving the
-- cursor, and deletes the row after the last one. No row: nothing pending.
CREATE TABLE bill_projection_sweep (
    name VARCHAR(64) NOT NULL,
    last_station_id BIGINT NULL,
    last_month CHAR(6) NULL,
    marked_position BIGINT NOT NULL,
    updated_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
