//! The subcommands of the `factledger` binary: flags in `args`, one file per group
//! of commands; `run` dispatches.

mod args;
mod commands;
mod common;
mod compensate;
mod jobs;
mod log;
mod projections;
mod providers;
mod secrets;
mod serve;
mod withdrawals;

use anyhow::Context;
pub use args::Cli;
use args::{CallbacksAction, Command, CommandsAction, CronAction, OutboxAction};
use common::Layout;
use std::process::ExitCode;

/// Run one parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let Cli {
        database_url,
        integrity_keys,
        anchor_file,
        partitions,
        partition,
        command,
    } = cli;
    // The key and anchor files are named by absolute paths from here on: a command
    // run from another directory must not silently find no anchors (issue 32 item 2).
    let absolute = |p: std::path::PathBuf, flag: &str| {
        std::path::absolute(&p)
            .with_context(|| format!("{flag} {}: cannot make it an absolute path", p.display()))
    };
    let layout = Layout::resolve(
        database_url,
        absolute(integrity_keys, "--integrity-keys")?,
        absolute(anchor_file, "--anchor-file")?,
        partitions,
        partition,
    )?;
    let command = match command {
        Command::Serve {
            listen,
            http,
            read_database_url,
            country_code,
            environment,
            public_url,
            cron_lease_ms,
            test_cron_heartbeat,
            outbox,
            platform_countries,
            settlement_every,
            anchor_every_s,
            payouts,
            services,
        } => {
            let flags = serve::ServeFlags {
                listen,
                http,
                read_database_url,
                country_code,
                environment,
                public_url,
                cron_lease_ms,
                test_cron_heartbeat,
                outbox,
                platform_countries,
                settlement_every,
                anchor_every_s,
                payouts,
                services,
            };
            return serve::serve(&layout, flags).await;
        }
        other => other,
    };
    let g = &layout.one()?;
    match command {
        Command::Serve { .. } => anyhow::bail!("serve is started above"),
        Command::Migrate => log::migrate(g).await,
        Command::CatchUp => projections::catch_up(g).await,
        Command::Rebuild {
            projection,
            scope,
            batch_events,
            pause_ms,
        } => projections::rebuild(g, projection, scope, batch_events, pause_ms).await,
        Command::Reconcile { repair } => projections::reconcile(g, repair).await,
        Command::Events {
            aggregate_type,
            aggregate_id,
        } => log::events(g, aggregate_type, aggregate_id).await,
        Command::Verify {
            stream,
            json,
            allow_no_anchors,
        } => log::verify(g, stream, json, allow_no_anchors).await,
        Command::Anchor => log::anchor(g).await,
        Command::Integrity { action } => log::integrity(g, action),
        Command::Keys { action } => log::keys(g, action).await,
        Command::Accounts { action } => projections::accounts(g, action).await,
        Command::Jobs { action } => jobs::jobs(&g.database_url, &g.integrity_keys, action).await,
        Command::Withdrawals { action } => withdrawals::withdrawals(g, action).await,
        Command::Compensate {
            job,
            business_id,
            limit,
            services,
        } => compensate::compensate(g, job, business_id, limit, &services).await,
        Command::Commands {
            action:
                CommandsAction::Apply {
                    file,
                    atomic,
                    chunk,
                },
        } => commands::apply(g, &file, atomic, chunk).await,
        Command::Cron {
            action: CronAction::List,
        } => jobs::cron_list(g).await,
        Command::Outbox {
            action: OutboxAction::Status,
        } => jobs::outbox_status(g).await,
        Command::Outbox {
            action:
                OutboxAction::DeadLetters {
                    sink,
                    all,
                    after,
                    limit,
                },
        } => jobs::outbox_dead_letters(g, sink, all, after, limit).await,
        Command::Outbox {
            action: OutboxAction::Replay { id, outbox },
        } => jobs::outbox_replay(g, id, *outbox).await,
        Command::Callbacks {
            action: CallbacksAction::ReplayFailed { revive },
        } => jobs::callbacks_replay_failed(g, revive).await,
    }
}
