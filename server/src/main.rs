use std::io::BufRead;

use anyhow::Context;
use clap::Parser;
use docflow::{
    auth,
    config::{Cli, Command, Config, DemoArgs, PlanArg, RoleArg, UserCommand},
    db, demo, telemetry, Application, Roles,
};

// Many connections and short-lived buffers across threads: mimalloc keeps the
// resident size close to what is live, where glibc's per-thread arenas hold
// on to memory freed elsewhere (password hashes, request buffers).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // A parser child stays single-threaded and small: no runtime, no pools.
    if let Command::ParseChild { memory } = cli.command {
        return docflow::parser::child::run(memory);
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
            queues,
        } => serve(config, demo, Roles::all(queues)).await,
        Command::Web { config, demo } => serve(config, demo, Roles::web()).await,
        Command::Worker { config, queues } => {
            serve(
                config,
                DemoArgs {
                    demo: false,
                    demo_password: String::new(),
                },
                Roles::worker(queues),
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
        Command::ParseChild { memory } => docflow::parser::child::run(memory),
    }
}

async fn serve(config: Config, demo_args: DemoArgs, roles: Roles) -> anyhow::Result<()> {
    telemetry::init(config.log_json);
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
            let password = match password {
                Some(p) => p,
                None => {
                    eprintln!("password for {email}:");
                    let mut line = String::new();
                    std::io::stdin()
                        .lock()
                        .read_line(&mut line)
                        .context("reading the password")?;
                    line.trim_end_matches(['\r', '\n']).to_string()
                }
            };
            let pool = db::connect_and_migrate(&config.database_url, 2).await?;
            let role = match role {
                RoleArg::Admin => db::Role::Admin,
                RoleArg::Member => db::Role::Member,
            };
            let plan = match plan {
                PlanArg::Free => db::Plan::Free,
                PlanArg::Paid => db::Plan::Paid,
            };
            demo::add_user(&pool, &email, &tenant, plan, role, &password).await?;
            println!("added {email} ({}) to tenant {tenant}", role.as_str());
            Ok(())
        }
        UserCommand::Token {
            config,
            email,
            name,
        } => {
            telemetry::init(config.log_json);
            let pool = db::connect_and_migrate(&config.database_url, 2).await?;
            let mut conn = pool.acquire().await?;
            let user = db::user_by_email(&mut conn, &email)
                .await?
                .with_context(|| format!("no user {email}"))?;
            let token = auth::create_token(&mut conn, user.id, &name).await?;
            println!("{token}");
            Ok(())
        }
    }
}
