//! How the process is asked to stop: the signals that end a gateway or a
//! console cleanly, watched once for whichever serves.

/// Completes when the process is asked to stop (SIGTERM, SIGINT or SIGHUP;
/// Ctrl-C elsewhere), so that the gateway answers and records every call in
/// flight before it exits instead of dying with them. A signal that cannot
/// be watched keeps its default action, and says so. Must be called within
/// the runtime.
pub(crate) fn stop_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{Signal, SignalKind, signal};

        let watch = |kind: SignalKind, name: &'static str| match signal(kind) {
            Ok(stream) => Some((stream, name)),
            Err(err) => {
                tracing::warn!("{name} cannot be watched, so it stops hintgate at once: {err}");
                None
            }
        };
        async fn received(watched: Option<(Signal, &'static str)>) -> &'static str {
            match watched {
                Some((mut stream, name)) => {
                    stream.recv().await;
                    name
                }
                None => std::future::pending().await,
            }
        }
        let watched = [
            watch(SignalKind::terminate(), "SIGTERM"),
            watch(SignalKind::interrupt(), "SIGINT"),
            watch(SignalKind::hangup(), "SIGHUP"),
        ];
        async move {
            let [term, int, hup] = watched;
            let name = tokio::select! {
                name = received(term) => name,
                name = received(int) => name,
                name = received(hup) => name,
            };
            tracing::info!("{name}: stopping");
        }
    }
    #[cfg(not(unix))]
    {
        async {
            if tokio::signal::ctrl_c().await.is_ok() {
                tracing::info!("Ctrl-C: stopping");
            } else {
                std::future::pending::<()>().await;
            }
        }
    }
}
