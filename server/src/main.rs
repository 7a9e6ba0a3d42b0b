use std::io::BufRead;

use anyhow::Context;
use clap::Parser;
use docflow::{
    demo,
    identity::auth,
    platform::config::{
        Cli, Command, Config, DemoArgs, PlanArg, RoleArg, TokenCommand, UserCommand,
    },
    platform::db,
    platform::telemetry,
    Application, Roles,
};

// Many connections and short-lived buffers across threads: mimalloc keeps the
// resident size close to what is live, where glibc's per-thread arenas hold
// on to memory freed elsewhere (password hashes, request buffers).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // A parser child stays single-threaded and small: no runtime, no pools.
    if let Command::ParseChild {
        memory,
        ocr_languages,
    } = cli.command
    {
        return docflow::parser::child::run(memory, ocr(ocr_languages));
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(dispatch(cli.command))
}

async fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run {
            config,
            demo,
            worker,
        } => {
            serve(
                config,
                demo,
                Roles::all(worker.queues).with_slots(worker.slots),
            )
            .await
        }
        Command::Web { config, demo } => serve(config, demo, Roles::web()).await,
        Command::Worker { config, worker } => {
            serve(
                config,
                DemoArgs {
                    demo: false,
                    demo_password: String::new(),
                },
                Roles::worker(worker.queues).with_slots(worker.slots),
            )
            .await
        }
        Command::Migrate { config } => {
            telemetry::init(config.log_json);
            db::connect_and_migrate(&config.database_url, 2).await?;
            tracing::info!("database is migrated");
            Ok(())
        }
        Command::User { command } => user(command).await,
        Command::Token { command } => token(command).await,
        Command::ParseChild {
            memory,
            ocr_languages,
        } => docflow::parser::child::run(memory, ocr(ocr_languages)),
    }
}

fn ocr(languages: String) -> docflow::parser::ocr::Ocr {
    docflow::parser::ocr::Ocr { languages }
}

async fn serve(mut config: Config, demo_args: DemoArgs, roles: Roles) -> anyhow::Result<()> {
    telemetry::init(config.log_json);
    // The demo's webhook receivers are local test servers.
    config.webhook_allow_http |= demo_args.demo;
    let app = Application::build(config, roles).await?;
    if demo_args.demo {
        demo::seed(&app.state().pool, &demo_args.demo_password)
            .await
            .context("seeding demo users")?;
    }
    if let Some(addr) = app.addr() {
        tracing::info!("docflow listening on http://{addr}");
    }
    docflow::cancel_on_signal(app.shutdown_token());
    app.run().await
}

async fn user(command: UserCommand) -> anyhow::Result<()> {
    match command {
        UserCommand::Add {
            config,
            email,
            tenant,
            role,
            plan,
            password,
        } => {
            telemetry::init(config.log_json);
            let password = password_or_stdin(password, &email)?;
            let pool = db::connect_and_migrate(&config.database_url, 2).await?;
            let role = match role {
                RoleArg::Admin => db::Role::Admin,
                RoleArg::Member => db::Role::Member,
                RoleArg::Viewer => db::Role::Viewer,
            };
            let plan = match plan {
                PlanArg::Free => db::Plan::Free,
                PlanArg::Paid => db::Plan::Paid,
            };
            demo::add_user(&pool, &email, &tenant, plan, role, &password).await?;
            println!("added {email} ({}) to tenant {tenant}", role.as_str());
            Ok(())
        }
        UserCommand::Password {
            config,
            email,
            password,
        } => {
            telemetry::init(config.log_json);
            let password = password_or_stdin(password, &email)?;
            anyhow::ensure!(!password.is_empty(), "the password is empty");
            let pool = db::connect_and_migrate(&config.database_url, 2).await?;
            auth::set_password(&pool, &email, &password).await?;
            println!("password of {email} set; their sessions have ended");
            Ok(())
        }
    }
}

fn password_or_stdin(password: Option<String>, email: &str) -> anyhow::Result<String> {
    if let Some(p) = password {
        return Ok(p);
    }
    eprintln!("password for {email}:");
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("reading the password")?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

/// The database and the user behind a `docflow token …` command.
async fn token_owner(config: &Config, email: &str) -> anyhow::Result<(sqlx::PgPool, db::UserRow)> {
    telemetry::init(config.log_json);
    let pool = db::connect_and_migrate(&config.database_url, 2).await?;
    let mut conn = pool.acquire().await?;
    let user = db::user_by_email(&mut conn, email)
        .await?
        .with_context(|| format!("no user {email}"))?;
    drop(conn);
    Ok((pool, user))
}

async fn token(command: TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Create {
            config,
            email,
            name,
            expires_in,
        } => {
            let (pool, user) = token_owner(&config, &email).await?;
            let expires_at = expires_in
                .map(|d| chrono::Duration::from_std(d).map(|d| chrono::Utc::now() + d))
                .transpose()
                .context("that expiry is too far away")?;
            let mut conn = pool.acquire().await?;
            let token = auth::create_token(&mut conn, user.id, &name, expires_at).await?;
            match expires_at {
                Some(at) => eprintln!("token `{name}` of {email}, expires {}", at.to_rfc3339()),
                None => eprintln!("token `{name}` of {email}, works until revoked"),
            }
            println!("{token}");
            Ok(())
        }
        TokenCommand::List { config, email } => {
            let (pool, user) = token_owner(&config, &email).await?;
            let mut conn = pool.acquire().await?;
            let tokens = db::tokens_of(&mut conn, user.id).await?;
            let at = |t: Option<chrono::DateTime<chrono::Utc>>| {
                t.map_or("-".to_string(), |t| t.format("%Y-%m-%d %H:%M").to_string())
            };
            println!(
                "{:<36}  {:<16}  {:<16}  {:<16}  {:<16}  state",
                "id", "name", "created", "last used", "expires"
            );
            let now = chrono::Utc::now();
            for t in tokens {
                let state = if t.revoked_at.is_some() {
                    "revoked"
                } else if t.expires_at.is_some_and(|e| e <= now) {
                    "expired"
                } else {
                    "active"
                };
                println!(
                    "{:<36}  {:<16}  {:<16}  {:<16}  {:<16}  {state}",
                    t.id,
                    t.name,
                    at(Some(t.created_at)),
                    at(t.last_used_at),
                    at(t.expires_at)
                );
            }
            Ok(())
        }
        TokenCommand::Revoke {
            config,
            email,
            id,
            all,
        } => {
            let (pool, user) = token_owner(&config, &email).await?;
            let n = auth::revoke_tokens(&pool, user.id, if all { None } else { id }).await?;
            anyhow::ensure!(
                n > 0 || all,
                "{email} has no working token with that id (see `docflow token list`)"
            );
            println!("revoked {n} token(s) of {email}");
            Ok(())
        }
    }
}
