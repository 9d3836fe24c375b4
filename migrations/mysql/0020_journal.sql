-- Double entry (issue 16): the journal projection. Two lines per posting of the chart
-- of accounts (factledger_aggregates::ledger), each account's totals, and the currency
-- of every stream the journal has seen open. Rebuilt from events like every
-- projection (checkpoint `journal`).
CREATE TABLE journal (
    position BIGINT NOT NULL,
    leg INT NOT NULL,
    account VARCHAR(300) NOT NULL,
    debit_minor BIGINT NOT NULL,
    credit_minor BIGINT NOT NULL,
    currency CHAR(3) NOT NULL,
    ref_type VARCHAR(128) NOT NULL,
    ref_id VARCHAR(128) NOT NULL,
    entry_type VARCHAR(64) NOT NULL,
    stream_id VARCHAR(255) NOT NULL,
    PRIMARY KEY (position, leg),
    KEY idx_journal_account (account, position)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE account_balances (
    account VARCHAR(300) NOT NULL PRIMARY KEY,
    kind VARCHAR(64) NOT NULL,
    currency CHAR(3) NOT NULL,
    normal_side VARCHAR(8) NOT NULL,
    debits_minor BIGINT NOT NULL,
    credits_minor BIGINT NOT NULL,
    last_position BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE journal_stream_currencies (
    stream_type VARCHAR(64) NOT NULL,
    stream_id VARCHAR(255) NOT NULL,
    currency CHAR(3) NOT NULL,
    PRIMARY KEY (stream_type, stream_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
