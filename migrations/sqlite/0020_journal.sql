-- Double entry (issue 16): the journal projection; see migrations/mysql/0020.
CREATE TABLE journal (
    position INTEGER NOT NULL,
    leg INTEGER NOT NULL,
    account TEXT NOT NULL,
    debit_minor INTEGER NOT NULL,
    credit_minor INTEGER NOT NULL,
    currency TEXT NOT NULL,
    ref_type TEXT NOT NULL,
    ref_id TEXT NOT NULL,
    entry_type TEXT NOT NULL,
    stream_id TEXT NOT NULL,
    PRIMARY KEY (position, leg)
);
CREATE INDEX idx_journal_account ON journal (account, position);

CREATE TABLE account_balances (
    account TEXT NOT NULL PRIMARY KEY,
    kind TEXT NOT NULL,
    currency TEXT NOT NULL,
    normal_side TEXT NOT NULL,
    debits_minor INTEGER NOT NULL,
    credits_minor INTEGER NOT NULL,
    last_position INTEGER NOT NULL
);

CREATE TABLE journal_stream_currencies (
    stream_type TEXT NOT NULL,
    stream_id TEXT NOT NULL,
    currency TEXT NOT NULL,
    PRIMARY KEY (stream_type, stream_id)
);
