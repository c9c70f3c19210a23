//! `hintgate console`: the web console on loopback, over the same store as
//! the gateways (`hintgate-console`).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use hintgate_console::Console;
use hintgate_store::Store;

use crate::args::ConsoleArgs;
use crate::exit::Exit;
use crate::output;
use crate::state::Use;

/// Runs `hintgate console`.
pub fn run(args: &ConsoleArgs) -> Result<Exit> {
    crate::output::init_logging("warn");
    // The key, when there is one, so that the log's chain is checked with
    // it; pins and the queue need none.
    let store = crate::state::open_store_of(
        &args.at,
        args.audit_key.as_deref(),
        &Use::Log { head: None },
    )?
    .store;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(async {
        let (console, listener) = start(store, args.listen).await?;
        output::out(&format!(
            "hintgate console: open {}\n(Ctrl-C stops it)\n",
            console.url()
        ))?;
        hintgate_console::serve(listener, console, crate::signal::stop_signal())
            .await
            .context("the console stopped")?;
        Ok(Exit::Success)
    })
}

/// Binds the console's socket and makes the console, answering as the user
/// this command runs as.
pub async fn start(
    store: Arc<dyn Store>,
    listen: Option<SocketAddr>,
) -> Result<(Arc<Console>, tokio::net::TcpListener)> {
    let listener = hintgate_console::bind(listen).await?;
    let addr = listener
        .local_addr()
        .context("the console's socket has no address")?;
    let console = Console::new(store, addr, &crate::approvals::who())?;
    Ok((Arc::new(console), listener))
}
