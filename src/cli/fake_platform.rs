//! `deepcli fake-platform telegram|slack|discord|say|press`: a local fake of a platform's API to try
//! the adapters on (`crate::fake_platform`), and a person chatting through it, at a prompt or a
//! command at a time.

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::ExitStatus;
use crate::fake_platform::{Answer, Chat, Platform, Press, Say, discord, slack, telegram};

const SERVE_EXIT_CODES: &str = "\
Type a line to send it as the person in the chat; /help lists the prompt's commands. The fake
serves until Ctrl-C, stdin closed or not.

Exit codes:
  0  stopped
  2  the fake could not start (the address is taken)";

const SAY_EXIT_CODES: &str = "\
It prints what the bot posted and edited in the chat: its edits of earlier messages first (they
stay where the message was), then its new messages, once it posted one and was quiet a moment.

Exit codes:
  0  the bot answered: what it posted and edited is printed
  1  the bot did not answer within --wait, or there is no such button
  2  no fake platform answers at --to";

/// Where the fakes listen unless told, and where `say` and `press` look for one.
const DEFAULT_ADDR: &str = "127.0.0.1:7441";

#[derive(Debug, Subcommand)]
pub(super) enum FakePlatformCommand {
    /// Serve a fake Telegram Bot API, and chat with the bot at a prompt.
    #[command(after_help = SERVE_EXIT_CODES)]
    Telegram(ServeArgs),
    /// Serve a fake Slack (Web API and Socket Mode), and chat with the app at a prompt.
    #[command(after_help = SERVE_EXIT_CODES)]
    Slack(ServeArgs),
    /// Serve a fake Discord (REST API and Gateway), and chat with the bot at a prompt.
    #[command(after_help = SERVE_EXIT_CODES)]
    Discord(ServeArgs),
    /// Say something to the bot of a running fake, and print its answer.
    #[command(after_help = SAY_EXIT_CODES)]
    Say(SayArgs),
    /// Press a button of the bot's latest message with buttons, and print its answer.
    #[command(after_help = SAY_EXIT_CODES)]
    Press(PressArgs),
}

#[derive(Debug, Args)]
pub(super) struct ServeArgs {
    /// The address to serve the platform's API on.
    #[arg(long, default_value = DEFAULT_ADDR, value_name = "ADDR")]
    listen: SocketAddr,
    /// Who the prompt speaks as.
    #[arg(long, default_value = "alice", value_name = "NAME")]
    from: String,
}

#[derive(Debug, Args)]
pub(super) struct Speaker {
    /// The fake's address (its `--listen`).
    #[arg(long, default_value = DEFAULT_ADDR, value_name = "ADDR")]
    to: String,
    /// Who speaks: each name is a person of its own.
    #[arg(long, default_value = "alice", value_name = "NAME")]
    from: String,
    /// Speak in the group rather than the person's direct chat with the bot.
    #[arg(long)]
    group: bool,
    /// How long to wait for the bot's message, in seconds.
    #[arg(long, default_value_t = 30, value_name = "SECONDS")]
    wait: u64,
}

impl Speaker {
    fn chat(&self) -> Chat {
        if self.group {
            Chat::Group
        } else {
            Chat::Direct
        }
    }
}

#[derive(Debug, Args)]
pub(super) struct SayArgs {
    /// What the person says. In the group, `@` and the bot's name mentions it.
    text: String,
    #[command(flatten)]
    speaker: Speaker,
}

#[derive(Debug, Args)]
pub(super) struct PressArgs {
    /// The button's number, as the bot's message shows it (`[1] …`).
    button: usize,
    #[command(flatten)]
    speaker: Speaker,
}

pub(super) fn run(command: FakePlatformCommand) -> ExitStatus {
    match command {
        FakePlatformCommand::Telegram(args) => match telegram::Server::bind(args.listen) {
            Ok(server) => {
                let base = format!("http://{}", server.addr);
                print_banner(&telegram_banner(&base));
                serve(&server.fake, &args.from)
            }
            Err(e) => cannot_listen(args.listen, &e),
        },
        FakePlatformCommand::Slack(args) => match slack::Server::bind(args.listen) {
            Ok(server) => {
                let app = server.fake.install(SLACK_APP, 1, None);
                print_banner(&slack_banner(&server.base(), &app));
                serve(&server.fake, &args.from)
            }
            Err(e) => cannot_listen(args.listen, &e),
        },
        FakePlatformCommand::Discord(args) => match discord::Server::bind(args.listen) {
            Ok(server) => {
                let bot = server.fake.install(DISCORD_BOT, 1);
                print_banner(&discord_banner(&server.base(), &bot));
                serve(&server.fake, &args.from)
            }
            Err(e) => cannot_listen(args.listen, &e),
        },
        FakePlatformCommand::Say(args) => {
            let body = Say {
                from: args.speaker.from.clone(),
                chat: args.speaker.chat(),
                text: args.text,
                wait_s: args.speaker.wait,
            };
            ask(&args.speaker, "say", &body)
        }
        FakePlatformCommand::Press(args) => {
            let body = Press {
                from: args.speaker.from.clone(),
                chat: args.speaker.chat(),
                button: args.button,
                wait_s: args.speaker.wait,
            };
            ask(&args.speaker, "press", &body)
        }
    }
}

/// The Slack app the fake installs, as people mention it (`@deepcli`).
const SLACK_APP: &str = "deepcli";

fn telegram_banner(base: &str) -> String {
    format!(
        "\
A fake Telegram Bot API serves on {base} (the bot @{bot}).
Point an account of channels.yaml at it:

  telegram:
    accounts:
      default:
        apiBase: {base}
        botToken: {{source: env, id: TELEGRAM_BOT_TOKEN}}

and start deepcli up with TELEGRAM_BOT_TOKEN={token}.",
        bot = telegram::BOT_NAME,
        token = telegram::TOKEN,
    )
}

fn slack_banner(base: &str, app: &slack::App) -> String {
    format!(
        "\
A fake Slack serves on {base} (the app @{name}).
Point an account of channels.yaml at it:

  slack:
    accounts:
      default:
        apiBase: {base}
        botToken: {{source: env, id: SLACK_BOT_TOKEN}}
        appToken: {{source: env, id: SLACK_APP_TOKEN}}

and start deepcli up with SLACK_BOT_TOKEN={bot} SLACK_APP_TOKEN={app_token}.",
        name = app.name,
        bot = app.bot_token,
        app_token = app.app_token,
    )
}

/// The Discord bot the fake installs, as people mention it (`@deepcli`).
const DISCORD_BOT: &str = "deepcli";

fn discord_banner(base: &str, bot: &discord::Bot) -> String {
    format!(
        "\
A fake Discord serves on {base} (the bot @{name}, in guild {guild} with #general {general}).
Point an account of channels.yaml at it:

  discord:
    groupPolicy: open
    accounts:
      default:
        apiBase: {base}
        token: {{source: env, id: DISCORD_BOT_TOKEN}}

and start deepcli up with DISCORD_BOT_TOKEN={token}.",
        name = bot.name,
        guild = discord::GUILD,
        general = discord::GENERAL,
        token = bot.token,
    )
}

fn print_banner(banner: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{banner}\nType a message to send it; /help lists the commands.\n"
    );
    let _ = out.flush();
}

fn cannot_listen(addr: SocketAddr, e: &std::io::Error) -> ExitStatus {
    eprintln!("error: cannot listen on {addr}: {e}");
    eprintln!("hint: pass another address with --listen ADDR");
    ExitStatus::Error
}

/// One line typed at the prompt.
#[derive(Debug, PartialEq, Eq)]
enum Typed {
    Say(String),
    As(String),
    In(Chat),
    Press(usize),
    Help,
    Nothing,
    Unknown(String),
}

fn parse_typed(line: &str) -> Typed {
    let line = line.trim();
    let Some(command) = line.strip_prefix('/') else {
        return if line.is_empty() {
            Typed::Nothing
        } else {
            Typed::Say(line.to_string())
        };
    };
    let (word, rest) = command.split_once(' ').unwrap_or((command, ""));
    let rest = rest.trim();
    match word {
        "as" if !rest.is_empty() && !rest.contains(' ') => Typed::As(rest.to_string()),
        "group" if rest.is_empty() => Typed::In(Chat::Group),
        "dm" if rest.is_empty() => Typed::In(Chat::Direct),
        "press" => rest
            .parse()
            .map_or(Typed::Unknown(line.into()), Typed::Press),
        "help" => Typed::Help,
        _ => Typed::Unknown(line.into()),
    }
}

const PROMPT_HELP: &str = "\
  TEXT      say TEXT in the current chat
  /as NAME  speak as NAME (each name is a person of its own)
  /group    speak in the group (mention the bot with @ and its name)
  /dm       speak in your direct chat with the bot
  /press N  press button N of the bot's latest message with buttons here
  /help     this list; Ctrl-C stops the fake";

/// Prints the fake's transcript as it grows, and says what is typed at the prompt, until the
/// process is stopped.
fn serve<P: Platform>(platform: &P, first: &str) -> ExitStatus {
    let typist = platform.clone();
    let first = first.to_string();
    std::thread::spawn(move || {
        let mut from = first;
        let mut chat = Chat::Direct;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            match parse_typed(&line) {
                Typed::Say(text) => {
                    typist.say(&from, chat, &text);
                }
                Typed::As(name) => from = name,
                Typed::In(to) => chat = to,
                Typed::Press(n) => {
                    if let Err(why) = typist.press(&from, chat, n) {
                        eprintln!("{why}");
                    }
                }
                Typed::Help => eprintln!("{PROMPT_HELP}"),
                Typed::Nothing => {}
                Typed::Unknown(line) => eprintln!("unknown command {line}; /help lists them"),
            }
        }
    });
    let mut shown = 0;
    loop {
        let lines = platform.transcript(shown);
        shown += lines.len();
        if !lines.is_empty() {
            let mut out = std::io::stdout().lock();
            for line in lines {
                let _ = writeln!(out, "[{}] {line}", line.chat);
            }
            let _ = out.flush();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sends a say or press to the fake at `speaker.to` and prints the bot's answer.
fn ask(speaker: &Speaker, route: &str, body: &impl serde::Serialize) -> ExitStatus {
    let base = if speaker.to.contains("://") {
        speaker.to.clone()
    } else {
        format!("http://{}", speaker.to)
    };
    let url = format!("{}/_fake/{route}", base.trim_end_matches('/'));
    let runtime = match super::current_thread() {
        Ok(runtime) => runtime,
        Err(status) => return status,
    };
    let answer = runtime.block_on(async {
        let client = crate::http_client::direct()
            .timeout(Duration::from_secs(speaker.wait.min(600) + 10))
            .build()
            .map_err(crate::http_client::error_text)?;
        let response = client
            .post(&url)
            .json(body)
            .send()
            .await
            .map_err(crate::http_client::error_text)?;
        if !response.status().is_success() {
            let refusal = response.text().await.unwrap_or_default();
            return Ok(Err(refusal));
        }
        response
            .json::<Answer>()
            .await
            .map(Ok)
            .map_err(crate::http_client::error_text)
    });
    match answer {
        Err(e) => {
            eprintln!("error: no fake platform answers at {base}: {e}");
            eprintln!(
                "hint: start one with `deepcli fake-platform telegram` (or slack, discord), or pass its address with --to"
            );
            ExitStatus::Error
        }
        Ok(Err(refusal)) => {
            eprintln!("error: {refusal}");
            ExitStatus::Failure
        }
        Ok(Ok(answer)) => print_answer(&answer, speaker.wait),
    }
}

fn print_answer(answer: &Answer, wait: u64) -> ExitStatus {
    let mut out = std::io::stdout().lock();
    for line in &answer.lines {
        let _ = writeln!(out, "{line}");
    }
    if answer.replied {
        ExitStatus::Success
    } else {
        eprintln!("error: the bot posted nothing within {wait} s");
        eprintln!(
            "hint: `deepcli status` shows whether the adapter is connected, and `deepcli channels logs` what it did"
        );
        ExitStatus::Failure
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_platform::Line;

    #[test]
    fn the_prompt_reads_text_and_commands() {
        assert_eq!(
            parse_typed("  hello there "),
            Typed::Say("hello there".into())
        );
        assert_eq!(parse_typed(""), Typed::Nothing);
        assert_eq!(parse_typed("/as bob"), Typed::As("bob".into()));
        assert_eq!(parse_typed("/group"), Typed::In(Chat::Group));
        assert_eq!(parse_typed("/dm"), Typed::In(Chat::Direct));
        assert_eq!(parse_typed("/press 2"), Typed::Press(2));
        assert_eq!(
            parse_typed("/press two"),
            Typed::Unknown("/press two".into())
        );
        assert_eq!(parse_typed("/as"), Typed::Unknown("/as".into()));
        assert_eq!(parse_typed("/nope"), Typed::Unknown("/nope".into()));
    }

    #[test]
    fn a_line_shows_its_speaker_edits_and_buttons() {
        let line = Line {
            chat: "dm alice".into(),
            from: None,
            text: "Allow?\nrm -rf build".into(),
            buttons: vec!["Allow once".into(), "Reject".into()],
            edited: false,
        };
        assert_eq!(
            line.to_string(),
            "bot: Allow?\n  rm -rf build\n  [1] Allow once [2] Reject"
        );
        let edit = Line {
            edited: true,
            buttons: vec![],
            text: "Allowed".into(),
            ..line
        };
        assert_eq!(edit.to_string(), "bot (edited): Allowed");
    }
}
