-- Rebuilds on demand (issue 3). A full rebuild fills shadow tables (`<table>__rebuild`)
-- from position 0 and swaps them in; see src/rebuild.rs for the protocol.

-- While a rebuild holds a projection (`hold` not NULL) the runner's compare-and-set
-- refuses to advance it. A hold whose lease expired is cleared by whoever finds it.
--
-- `generation` says which set of tables the checkpoint describes. Each set carries its
-- own generation and position in a one-row table swapped together with it
-- (`wallet_generation`); the runner advances the checkpoint only while the two
-- generations agree. So a swap, however it is interrupted or delayed, can never leave
-- rows of one set under the position of another: after a rename the generations
-- differ, the runner stops, and the checkpoint adopts the set's own position.
ALTER TABLE projection_checkpoints ADD COLUMN hold VARCHAR(64) NULL,
    ADD COLUMN generation BIGINT NOT NULL DEFAULT 0;

-- One full rebuild per projection at a time: the holder renews `heartbeat` with every
-- batch it writes (and fails if it lost the lease); a lease whose heartbeat is older
-- than the lease time may be taken over. Kept apart from the checkpoint row so the
-- renewals never wait on the runner's row lock.
CREATE TABLE projection_leases (
    name VARCHAR(64) NOT NULL PRIMARY KEY,
    rebuild_id VARCHAR(64) NULL,
    heartbeat VARCHAR(32) NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE wallet_generation (
    id INT NOT NULL PRIMARY KEY,
    generation BIGINT NOT NULL,
    position BIGINT NOT NULL
) ENGINE = InnoDB;
INSERT INTO wallet_generation (id, generation, position) VALUES (1, 0, 0);

-- Every rebuild, full or scoped, run from the CLI or the API: its progress while it
-- runs and its outcome after.
CREATE TABLE projection_rebuilds (
    id VARCHAR(64) NOT NULL PRIMARY KEY,
    projection VARCHAR(64) NOT NULL,
    scope VARCHAR(200) NULL,
    requested_by VARCHAR(128) NOT NULL,
    status VARCHAR(16) NOT NULL,
    stage VARCHAR(16) NOT NULL,
    target_position BIGINT NOT NULL,
    position BIGINT NOT NULL,
    events_applied BIGINT NOT NULL,
    started_at VARCHAR(32) NOT NULL,
    updated_at VARCHAR(32) NOT NULL,
    finished_at VARCHAR(32) NULL,
    error TEXT NULL,
    KEY ix_projection_rebuilds_started (projection, started_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
