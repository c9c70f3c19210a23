//! `hintgate sandbox check` and `hintgate sandbox explain`: what this kernel
//! can enforce, and exactly what one server would get (and, with
//! `--start`, whether it starts in that sandbox, or why not).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Result;
use hintgate_policy::config::{SandboxConfig, Transport};
use hintgate_proxy::probe;
use hintgate_sandbox::launch::{self, launcher_line};
use hintgate_sandbox::{Access, Kernel, Plan, Property, Report};
use serde_json::json;

use crate::args::{SandboxCheckArgs, SandboxExplainArgs, SandboxPrepareArgs};
use crate::exit::Exit;
use crate::load::{self, ProcessEnv};
use crate::output;

/// Runs `hintgate sandbox check`: always exit 0, whatever the kernel offers.
pub fn check(args: &SandboxCheckArgs) -> Result<Exit> {
    let kernel = Kernel::current();
    // A table that asks for the most: no network, nothing writable.
    let strict = SandboxConfig::default();
    let report = kernel.report(&strict);
    if args.json {
        let value = json!({
            "kernel": kernel,
            "properties": properties(&report),
            "proves": report.proof(&strict),
        });
        output::out(&format!("{}\n", serde_json::to_string_pretty(&value)?))?;
        return Ok(Exit::Success);
    }
    let mut out = String::new();
    let abi = kernel.landlock_abi;
    if abi == 0 {
        out.push_str("Landlock: not available (no file confinement on this kernel)\n");
    } else {
        let _ = writeln!(out, "Landlock: ABI {abi}");
        let mut rights = vec!["read, write, execute, create and remove files"];
        if abi >= 2 {
            rights.push("rename and link across directories");
        }
        if abi >= 3 {
            rights.push("truncate");
        }
        if abi >= 4 {
            rights.push("TCP bind and connect");
        }
        if abi >= 5 {
            rights.push("ioctl on devices");
        }
        if abi >= 6 {
            rights.push("scoping of signals and abstract sockets");
        }
        if abi >= 9 {
            rights.push("connecting to pathname Unix sockets");
        }
        let _ = writeln!(out, "  rights it controls: {}", rights.join("; "));
        if abi < 9 {
            let _ = writeln!(
                out,
                "  not on this kernel: connecting to pathname Unix sockets (ABI 9){}",
                if kernel.seccomp {
                    "; the seccomp filter refuses the sockets instead"
                } else {
                    ""
                }
            );
        }
    }
    match (&kernel.user_namespaces, &kernel.user_namespaces_error) {
        (true, _) => out.push_str(
            "User and network namespaces: yes (a server with network = false gets no network)\n",
        ),
        (false, why) => {
            let _ = writeln!(
                out,
                "User and network namespaces: no ({})",
                why.as_deref().unwrap_or("unknown reason")
            );
        }
    }
    let _ = writeln!(
        out,
        "seccomp: {}",
        if kernel.seccomp {
            "yes (ptrace, mount, new namespaces, io_uring and more refused; with network = false, Unix sockets other than socketpair plumbing)"
        } else {
            "no"
        }
    );
    out.push_str("\nA server with `network = false` and no writable path would get:\n");
    render_report(&mut out, &report);
    let proof = report.proof(&strict);
    let _ = writeln!(
        out,
        "\nWhat that proves to the policy: {}",
        match (proof.no_network, proof.no_writes) {
            (true, true) =>
                "no network and no writes: its tools are taken as read-only and closed-world (sandbox-confined), even when it is untrusted",
            (true, false) => "no network: its tools are taken as closed-world",
            (false, true) => "nothing (no writes without no network proves nothing)",
            (false, false) => "nothing",
        }
    );
    output::out(&out)?;
    Ok(Exit::Success)
}

/// Server `name` of the configuration at `path`, its `${VAR}`s expanded;
/// `None` once what is wrong (the configuration's problems, an unknown
/// server) has been said.
fn configured_server(
    path: &std::path::Path,
    name: &str,
) -> Result<Option<hintgate_policy::config::ServerConfig>> {
    let loaded = load::config(path)?;
    if !loaded.diagnostics.is_empty() {
        output::err(&loaded.render())?;
    }
    let Some(config) = loaded.config else {
        return Ok(None);
    };
    let mut config = crate::run::expand(config, &ProcessEnv)?;
    let server = config.servers.remove(name);
    if server.is_none() {
        output::err(&format!(
            "error: unknown server `{name}` in {}\n",
            path.display()
        ))?;
    }
    Ok(server)
}

/// Runs `hintgate sandbox explain SERVER --config FILE`.
pub fn explain(args: &SandboxExplainArgs) -> Result<Exit> {
    let Some(server) = configured_server(&args.config, &args.server)? else {
        return Ok(Exit::Usage);
    };
    let Some(sandbox) = &server.sandbox else {
        output::err(&format!(
            "error: server `{}` has no [servers.{}.sandbox] table: it runs unconfined\n",
            args.server, args.server
        ))?;
        return Ok(Exit::Usage);
    };
    let Transport::Stdio {
        command,
        args: argv,
        env,
    } = &server.transport
    else {
        output::err(&format!(
            "error: server `{}` is reached by URL; only a stdio server can be sandboxed\n",
            args.server
        ))?;
        return Ok(Exit::Usage);
    };
    let inherited: BTreeMap<String, String> = std::env::vars().collect();
    let plan = match Plan::new(command, argv, env, sandbox, &inherited) {
        Ok(plan) => plan,
        Err(err) => {
            output::err(&format!("error: {err}\n"))?;
            // Where the table says so, the gateway installs it at start.
            match hintgate_proxy::prepare::needed(&server) {
                hintgate_proxy::prepare::Needed::Install(preparation) => output::err(&format!(
                    "note: its sandbox table says `prepare = \"on-start\"`: the gateway installs it before its first start, outside the sandbox, with `{}`\n",
                    preparation.install.describe()
                ))?,
                hintgate_proxy::prepare::Needed::Refused(why) => output::err(&format!(
                    "note: its sandbox table says `prepare = \"on-start\"`, but the gateway will not install it: {why}\n"
                ))?,
                hintgate_proxy::prepare::Needed::Nothing => {}
            }
            return Ok(Exit::Error);
        }
    };
    let report = Kernel::current().report(sandbox);
    let starts = sandbox.best_effort || report.missing_required().is_empty();
    let started = args.start.then(|| {
        try_start(
            probe::Target::Stdio {
                command: command.clone(),
                args: argv.clone(),
                env: env.clone(),
                sandbox: Some(sandbox.clone()),
            },
            args.timeout_s,
        )
    });
    let exit = match &started {
        Some(Err(_)) => Exit::Error,
        _ => Exit::Success,
    };
    if args.json {
        let value = json!({
            "server": args.server,
            "plan": plan,
            "env": plan.env.iter().map(|(key, _)| key).collect::<Vec<_>>(),
            "private_home": "a new directory under the system's temporary directory, removed when the server stops (HOME; TMPDIR is its tmp/)",
            "properties": properties(&report),
            "starts": starts,
            "proves": report.proof(sandbox),
            "network_hosts": sandbox.egress_hosts(),
            "start": started.as_ref().map(|started| match started {
                Ok(tools) => json!({"started": true, "tools": tools}),
                Err(why) => json!({"started": false, "error": why}),
            }),
        });
        output::out(&format!("{}\n", serde_json::to_string_pretty(&value)?))?;
        return Ok(exit);
    }
    let mut out = String::new();
    let _ = writeln!(out, "Server `{}`: {}", args.server, plan.program.display());
    if let Some(launch) = &plan.launch {
        let package = match (&launch.package, &launch.version) {
            (Some(name), Some(version)) => format!(" {name} {version}"),
            (Some(name), None) => format!(" {name}"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "Resolved: {}{package}, installed at {}\n  runs: {} {}\n  why: {}",
            launch.launcher,
            launch.installed.display(),
            plan.program.display(),
            plan.args.join(" "),
            launch.why
        );
    }
    out.push_str("\nPaths (and everything beneath them):\n");
    for rule in &plan.rules {
        let access = match rule.access {
            Access::Read => "read",
            Access::ReadExec => "read, execute",
            Access::Device => "read, write (device)",
            Access::ReadWrite => "read, write, create, remove",
        };
        let _ = writeln!(
            out,
            "  {:<28} {}  ({})",
            access,
            rule.path.display(),
            rule.why
        );
    }
    let _ = writeln!(
        out,
        "  {:<28} a private home, made at start and removed at stop (HOME; TMPDIR is its tmp/)",
        "read, write, create, remove"
    );
    out.push_str("  nothing else\n\nEnvironment:\n");
    for (key, value) in &plan.env {
        // The server's own variables may hold secrets: only their names.
        if key == "PATH" || key == "LANG" {
            let _ = writeln!(out, "  {key}={value}");
        } else {
            let _ = writeln!(out, "  {key} (from the server's env)");
        }
    }
    out.push_str("  HOME, TMPDIR: the private home\n");
    let _ = writeln!(
        out,
        "\nLimits: {} open files, {} processes, {} MiB of address space per process",
        plan.limits.open_files,
        plan.limits.processes,
        plan.limits.address_space / (1024 * 1024)
    );
    let _ = writeln!(
        out,
        "Network: {}",
        if sandbox.network {
            "allowed (not confined)".to_owned()
        } else if !sandbox.egress.is_empty() {
            format!(
                "only {} (own user and network namespace, whose one way out is an egress proxy hintgate runs on its 127.0.0.1:3128, named by HTTP_PROXY, HTTPS_PROXY and ALL_PROXY; names resolved by hintgate; every connection logged; no Unix sockets but socketpair plumbing). Open-world: it can send what it has to those hosts",
                sandbox.egress_hosts().join(", ")
            )
        } else {
            "none (own user and network namespace, loopback down; no Unix sockets but socketpair plumbing, so no local daemon's socket either)".to_owned()
        }
    );
    out.push_str("\nOn this kernel:\n");
    render_report(&mut out, &report);
    if !starts {
        out.push_str(
            "\nThe server would not start: the kernel cannot enforce what its table asks (set `best_effort = true` to run it with what holds).\n",
        );
    }
    match &started {
        Some(Ok(tools)) => {
            let _ = writeln!(
                out,
                "\nStarted in its sandbox: yes; it lists {tools} tool{}.",
                if *tools == 1 { "" } else { "s" }
            );
        }
        Some(Err(why)) => {
            let _ = writeln!(out, "\nStarted in its sandbox: no: {why}");
        }
        None => {}
    }
    output::out(&out)?;
    Ok(exit)
}

/// Starts the server of `target` (in its sandbox) as `hintgate lint` does,
/// lists its tools and stops it: how many it lists, or why it did not
/// start, in the words the gateway's error would use.
fn try_start(target: probe::Target, timeout_s: u64) -> Result<usize, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| format!("cannot start the runtime: {err}"))?;
    let options = probe::Options {
        timeout: std::time::Duration::from_secs(timeout_s.max(1)),
        call_read_only: false,
    };
    let probed = runtime.block_on(probe::probe(&target, options));
    // Child processes are killed with their handles; let the runtime finish that.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    probed
        .map(|probed| probed.listing.tools.len())
        .map_err(|err| err.to_string())
}

/// Runs `hintgate sandbox prepare SERVER --config FILE`: installs the
/// package a launcher line would fetch, outside the sandbox and with the
/// network, where the plan then finds it (npm's `npx` cache, uv's or pipx's
/// tools, the project's `.venv`), and says what it installed where.
pub fn prepare(args: &SandboxPrepareArgs) -> Result<Exit> {
    let Some(server) = configured_server(&args.config, &args.server)? else {
        return Ok(Exit::Usage);
    };
    let Transport::Stdio {
        command,
        args: argv,
        env,
    } = &server.transport
    else {
        output::err(&format!(
            "error: server `{}` is reached by URL; there is nothing to install\n",
            args.server
        ))?;
        return Ok(Exit::Usage);
    };
    let Some(line) = launcher_line(command, argv) else {
        output::out(&format!(
            "Server `{}` runs `{command}` directly, not through a launcher that fetches a package: nothing to install.\n",
            args.server
        ))?;
        return Ok(Exit::Success);
    };
    let inherited: BTreeMap<String, String> = std::env::vars().collect();
    // The launcher's own installer, found where the server's `PATH` finds
    // the launcher: the same command the gateway runs at start.
    let search = env
        .get("PATH")
        .or_else(|| inherited.get("PATH"))
        .cloned()
        .unwrap_or_default();
    let install = match launch::install(&line, command, &search) {
        Ok(install) => install,
        Err(err) => {
            output::err(&format!("error: {err}\n"))?;
            return Ok(Exit::Error);
        }
    };
    let shown = install.describe();
    output::err(&format!(
        "installing for server `{}` (outside the sandbox, with the network): {shown}\n",
        args.server
    ))?;
    let status = std::process::Command::new(&install.program)
        .args(&install.args)
        .env("PATH", &search)
        .stdin(std::process::Stdio::null())
        // Its output is for the user, not for a script reading ours.
        .stdout(std::process::Stdio::inherit())
        .status();
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => {
            output::err(&format!(
                "error: `{shown}` failed ({status}); nothing was installed for server `{}`\n",
                args.server
            ))?;
            return Ok(Exit::Error);
        }
        Err(err) => {
            output::err(&format!(
                "error: cannot run `{shown}` to install server `{}`'s package: {err}\n",
                args.server
            ))?;
            return Ok(Exit::Error);
        }
    }
    // What the sandbox will run now: the plan resolves the line again.
    let sandbox = server.sandbox.clone().unwrap_or_default();
    match Plan::new(command, argv, env, &sandbox, &inherited) {
        Ok(plan) => {
            let mut out = String::new();
            if let Some(launch) = &plan.launch {
                let _ = writeln!(
                    out,
                    "Installed {}{} at {}",
                    launch
                        .package
                        .as_deref()
                        .unwrap_or("the project's environment"),
                    launch
                        .version
                        .as_deref()
                        .map(|version| format!(" {version}"))
                        .unwrap_or_default(),
                    launch.installed.display()
                );
            }
            let _ = writeln!(
                out,
                "In its sandbox, server `{}` runs: {} {}",
                args.server,
                plan.program.display(),
                plan.args.join(" ")
            );
            output::out(&out)?;
            Ok(Exit::Success)
        }
        Err(err) => {
            output::err(&format!(
                "error: `{shown}` succeeded, but the sandbox still cannot find what to run: {err}\n"
            ))?;
            Ok(Exit::Error)
        }
    }
}

fn properties(report: &Report) -> Vec<serde_json::Value> {
    Property::ALL
        .iter()
        .filter_map(|property| {
            if report.holds(*property) {
                Some(json!({"property": property, "holds": true, "means": property.describe()}))
            } else {
                report
                    .missing
                    .iter()
                    .find(|missing| missing.property == *property)
                    .map(|missing| {
                        json!({
                            "property": property,
                            "holds": false,
                            "required": missing.required,
                            "covered": missing.covered,
                            "means": property.describe(),
                            "why": missing.why,
                        })
                    })
            }
        })
        .collect()
}

fn render_report(out: &mut String, report: &Report) {
    for property in Property::ALL {
        if report.holds(property) {
            let _ = writeln!(
                out,
                "  yes  {:<20} {}",
                property.as_str(),
                property.describe()
            );
        } else if let Some(missing) = report.missing.iter().find(|m| m.property == property) {
            let _ = writeln!(
                out,
                "  no   {:<20} {}{}",
                property.as_str(),
                missing.why,
                if missing.required {
                    " (required)"
                } else if missing.covered {
                    " (a second layer: its first holds)"
                } else {
                    ""
                }
            );
        }
    }
}
