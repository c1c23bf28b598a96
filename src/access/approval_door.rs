//! What the Access layer knows of approvals (approvals.md): the conversation whose message a
//! turn is answering (where a pending approval and its outcome are said, through the outbox),
//! and the chat commands `/approve <id>` and `/deny <id>`, which never reach an
//! agent. The decisions are the `approvals` module's: a command goes to it as an
//! [`ApprovalAsk`] over a channel the composition root made, whose other end it serves.

use tokio::sync::{mpsc, oneshot};

use super::Access;
use super::outbox::{Cause, Conversation, Outgoing};
use super::store::DeliveryKey;
use crate::ids::AccountKey;

/// A chat's approval command (already parsed) from `sender` (`<channel>:<senderId>`), on its
/// way to the approvals.
#[derive(Debug)]
pub(crate) struct ApprovalAsk {
    pub sender: String,
    pub command: Command,
    /// The text to answer the chat with; `None`: the sender is in no agent's
    /// `permissions.approvers`, so the command is answered as any message of theirs (the
    /// inbound policy), and nothing about approvals.
    pub reply: oneshot::Sender<Option<String>>,
}

/// Where the Access layer sends approval commands: a channel made before it and the approvals.
#[derive(Clone)]
pub(crate) struct ApprovalAsks(mpsc::UnboundedSender<ApprovalAsk>);

impl ApprovalAsks {
    /// The sending end, and the receiving end the approvals serve.
    pub(crate) fn channel() -> (ApprovalAsks, mpsc::UnboundedReceiver<ApprovalAsk>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (ApprovalAsks(tx), rx)
    }

    /// The approvals' answer to `sender`'s command; `None` when `sender` is no approver (or
    /// the approvals are gone).
    async fn ask(&self, sender: String, command: Command) -> Option<String> {
        let (reply, answer) = oneshot::channel();
        self.0
            .send(ApprovalAsk {
                sender,
                command,
                reply,
            })
            .ok()?;
        answer.await.ok().flatten()
    }
}

/// `/approve <id>`, `/approve <id> always` or `/deny <id>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChatCommand {
    pub approve: bool,
    pub id: String,
    /// `/approve <id> always`: also a rule of the exact tool kind and title, as the
    /// operator's `approve --always` makes.
    pub always: bool,
}

impl ChatCommand {
    /// Reads a message that is exactly a command (surrounding whitespace aside; a bot's
    /// `@name` after the command word, as Telegram writes it in groups, is allowed). Anything
    /// else is a message for the agent.
    pub(crate) fn parse(text: &str) -> Option<ChatCommand> {
        let mut words = text.split_whitespace();
        let word = words.next()?;
        let word = word.split_once('@').map_or(word, |(w, _)| w);
        let approve = match word {
            "/approve" => true,
            "/deny" => false,
            _ => return None,
        };
        let id = words.next()?;
        let always = match words.next() {
            None => false,
            Some("always") if approve => true,
            Some(_) => return None,
        };
        if words.next().is_some() || id.is_empty() || id.len() > 64 {
            return None;
        }
        Some(ChatCommand {
            approve,
            id: id.to_string(),
            always,
        })
    }
}

/// `/accept <task-id>` or `/reject <task-id> <reason>`: a person's verdict on a task
/// (tasks.md), decided by the same people as approvals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskCommand {
    pub id: String,
    /// The reason of a rejection; `None`: accepted.
    pub reject: Option<String>,
}

impl TaskCommand {
    /// Reads a message that is exactly `/accept <task-id>`, or `/reject <task-id>` and a
    /// reason.
    pub(crate) fn parse(text: &str) -> Option<TaskCommand> {
        let text = text.trim();
        let (word, rest) = text.split_once(char::is_whitespace)?;
        let word = word.split_once('@').map_or(word, |(w, _)| w);
        let rest = rest.trim_start();
        let (id, reason) = rest
            .split_once(char::is_whitespace)
            .map_or((rest, ""), |(id, reason)| (id, reason.trim()));
        if !id.starts_with("task-") || id.len() > 64 {
            return None;
        }
        let reject = match word {
            "/accept" if reason.is_empty() => None,
            "/reject" if !reason.is_empty() => Some(reason.to_string()),
            _ => return None,
        };
        Some(TaskCommand {
            id: id.to_string(),
            reject,
        })
    }
}

/// `/task <agent> <title> | <acceptance>`: a person gives `<agent>` a task for the agent of the
/// chat, which checks the result (tasks.md, "Who may do what").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewTaskCommand {
    /// What was asked, or why the command is not one (answered with its usage).
    pub asked: Result<AskedTask, String>,
    /// The chat's route: its agent (the task's owner) and session (its room). Filled by the
    /// door that took the command.
    pub owner: String,
    pub room: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AskedTask {
    pub assignee: String,
    pub title: String,
    pub acceptance: String,
}

/// How `/task` is written.
pub(crate) const TASK_USAGE: &str = "/task <agent> <title> | <acceptance>: gives <agent> a task for this chat's agent to check (for example: /task coder rename the flag | cargo test passes)";

impl NewTaskCommand {
    /// Reads a message that begins with the word `/task` (anything after it that is not a
    /// task is answered with the usage, never passed to the agent).
    pub(crate) fn parse(text: &str) -> Option<NewTaskCommand> {
        let text = text.trim();
        let (word, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
        let word = word.split_once('@').map_or(word, |(w, _)| w);
        if word != "/task" {
            return None;
        }
        let asked = (|| {
            let usage = || format!("usage: {TASK_USAGE}");
            let (assignee, rest) = rest
                .trim()
                .split_once(char::is_whitespace)
                .ok_or_else(usage)?;
            let (title, acceptance) = rest.split_once('|').ok_or_else(usage)?;
            let (title, acceptance) = (title.trim(), acceptance.trim());
            if title.is_empty() || acceptance.is_empty() || title.contains('\n') {
                return Err(usage());
            }
            Ok(AskedTask {
                assignee: assignee.trim_start_matches('@').to_string(),
                title: title.to_string(),
                acceptance: acceptance.to_string(),
            })
        })();
        Some(NewTaskCommand {
            asked,
            owner: String::new(),
            room: String::new(),
        })
    }
}

/// A chat command the approvals answer: an approval's, a task's verdict, or a new task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    Approval(ChatCommand),
    Task(TaskCommand),
    NewTask(NewTaskCommand),
}

impl Command {
    pub(crate) fn parse(text: &str) -> Option<Command> {
        ChatCommand::parse(text)
            .map(Command::Approval)
            .or_else(|| TaskCommand::parse(text).map(Command::Task))
            .or_else(|| NewTaskCommand::parse(text).map(Command::NewTask))
    }
}

/// The answer to an approval command from an admitted sender who is no agent's approver: one
/// sentence for every id, so that it tells nothing about the approval named.
pub(super) const NOT_AN_APPROVER: &str = "/approve, /deny, /accept, /reject and /task are answered only for an agent's approvers (`permissions.approvers`); nothing was decided";

/// The conversation a turn answers: where an approval of that turn is announced.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TurnOrigin {
    pub channel: String,
    pub account_id: String,
    pub message_id: String,
    pub peer: Option<crate::routing::input::Peer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_id: Option<String>,
    /// The delivery this turn answers: a failed announce's dead letter is filed beside it.
    #[serde(skip)]
    pub key: DeliveryKey,
}

impl Access {
    /// The conversation whose message the running turn of `session_key` answers, if any (a
    /// Hub or operator message, or a heartbeat, has none).
    pub(crate) fn turn_origin(&self, session_key: &str) -> Option<TurnOrigin> {
        self.origins.lock().ok()?.get(session_key).cloned()
    }

    pub(super) fn set_turn_origin(&self, session_key: &str, origin: Option<TurnOrigin>) {
        if let Ok(mut origins) = self.origins.lock() {
            match origin {
                Some(o) => origins.insert(session_key.to_string(), o),
                None => origins.remove(session_key),
            };
        }
    }

    /// Queues an approval's prompt for `origin`'s conversation, in the thread of the message
    /// whose turn asked; false when it could not be queued.
    pub(crate) async fn announce_to(
        &self,
        origin: &TurnOrigin,
        session_key: &str,
        approval_id: &str,
        text: &str,
    ) -> bool {
        let said = Outgoing {
            to: Conversation {
                channel: origin.key.channel.clone(),
                account_id: origin.key.account_id.clone(),
                peer_kind: origin.key.peer_kind.clone(),
                peer_id: origin.key.peer_id.clone(),
                thread_id: origin.key.thread_id.clone(),
            },
            reply_to: Some(origin.message_id.clone()),
            session_key: session_key.to_string(),
            cause: Cause::Approval,
            cause_id: approval_id.to_string(),
            text: text.to_string(),
        };
        match self.say(said).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(approval = %approval_id, error = %e, "cannot queue an approval's prompt");
                false
            }
        }
    }

    /// Queues an approval's outcome where its prompt went, if it went anywhere.
    pub(crate) async fn announce_outcome(&self, approval_id: &str, text: String) {
        let id = approval_id.to_string();
        let prompt = self
            .blocking(move |s| s.outbox_said(Cause::Approval, &id))
            .await;
        let Ok(Some(prompt)) = prompt else {
            return;
        };
        let said = Outgoing {
            cause: Cause::ApprovalOutcome,
            text,
            ..prompt
        };
        if let Err(e) = self.say(said).await {
            tracing::warn!(approval = %approval_id, error = %e, "cannot queue an approval's outcome");
        }
    }

    /// Queues a task verdict's outcome (`text`) where the task's newest verdict message went:
    /// a carrier that can edits that message, its buttons gone (tasks.md).
    pub(crate) async fn announce_task_outcome(&self, task_id: &str, text: String) {
        let id = task_id.to_string();
        let verdict = self.blocking(move |s| s.outbox_task_verdict(&id)).await;
        let Ok(Some(verdict)) = verdict else {
            return;
        };
        let said = Outgoing {
            cause: Cause::TaskVerdictOutcome,
            text,
            ..verdict
        };
        if let Err(e) = self.say(said).await {
            tracing::warn!(task = %task_id, error = %e, "cannot queue a task verdict's outcome");
        }
    }

    /// Answers an approval command (`/approve <id>`, `/deny <id>`) from a chat: from an
    /// approver, the door decides (or refuses them); the answer is the response, recorded as
    /// this envelope's, and goes to the reply sink. From anyone else it is any message of
    /// theirs to the inbound policy: a sender it does not admit gets its answer (a pairing code,
    /// nothing); one it admits gets [`NOT_AN_APPROVER`], the same for every id. Either way
    /// nothing says whether the approval exists or whose it is, and no approval event is
    /// written. The agent never sees the message.
    pub(super) async fn approval_command(
        &self,
        plan: &super::AccessPlan,
        envelope: &super::Envelope,
        key: &DeliveryKey,
        route: &super::route::Route,
    ) -> Result<super::Delivered, super::AccessError> {
        let (Some(approvals), Some(mut command)) =
            (&self.approvals, Command::parse(&envelope.text))
        else {
            return Err(super::internal("not an approval command"));
        };
        if let Command::NewTask(new) = &mut command {
            new.owner = route.agent_id().to_string();
            new.room = route.session_key().to_string();
        }
        let sender = envelope
            .facts
            .sender_id
            .as_ref()
            .map(|id| format!("{}:{}", key.channel, id.trim()));
        let answer = match sender {
            Some(sender) => approvals.ask(sender, command).await,
            None => None,
        };
        let answer = match answer {
            Some(answer) => answer,
            None => match self.gate(plan, envelope, route, key).await? {
                Some(gated) => return Ok(gated),
                None => NOT_AN_APPROVER.to_string(),
            },
        };
        self.answer_only(plan, envelope, key, route, &answer, "approvalCommand")
            .await
    }

    /// A click on an approval's button (conversations.md, "Approvals in the chat, with
    /// buttons") by `sender` (`<channel>:<platform user id>`): decided exactly as the command
    /// `/approve <id>` (`always`) or `/deny <id>` from that sender. The answer for the clicker
    /// alone; `None` when the sender is no agent's approver (nothing is decided or recorded).
    pub(crate) async fn approval_click(
        &self,
        sender: String,
        approval_id: &str,
        approve: bool,
        always: bool,
    ) -> Option<String> {
        let approvals = self.approvals.as_ref()?;
        let command = Command::Approval(ChatCommand {
            approve,
            id: approval_id.to_string(),
            always: approve && always,
        });
        approvals.ask(sender, command).await
    }

    /// A click on a task verdict's Accept button by `sender`: decided exactly as `/accept
    /// <task>` from that sender. `None` when the sender is no agent's approver.
    pub(crate) async fn task_click(&self, sender: String, task_id: &str) -> Option<String> {
        let approvals = self.approvals.as_ref()?;
        let command = Command::Task(TaskCommand {
            id: task_id.to_string(),
            reject: None,
        });
        approvals.ask(sender, command).await
    }

    /// Whether `origin`'s account has a carrier an approval could be announced through: its
    /// platform adapter or its reply sink.
    pub(crate) fn can_announce_to(&self, origin: &TurnOrigin) -> bool {
        self.plan().is_some_and(|plan| {
            plan.has_carrier(&AccountKey::new(&origin.channel, &origin.account_id))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_whole_command_with_one_id_is_a_command() {
        let cmd = |t: &str| ChatCommand::parse(t);
        assert_eq!(
            cmd(" /approve abc123 "),
            Some(ChatCommand {
                approve: true,
                id: "abc123".into(),
                always: false,
            })
        );
        assert_eq!(
            cmd("/approve abc123 always"),
            Some(ChatCommand {
                approve: true,
                id: "abc123".into(),
                always: true,
            })
        );
        assert_eq!(cmd("/deny abc always"), None);
        assert_eq!(cmd("/approve abc always now"), None);
        assert_eq!(
            cmd("/deny@deepbot abc"),
            Some(ChatCommand {
                approve: false,
                id: "abc".into(),
                always: false,
            })
        );
        assert_eq!(cmd("/approve"), None);
        assert_eq!(cmd("/approve a b"), None);
        assert_eq!(cmd("the owner said /approve abc"), None);
        assert_eq!(cmd("I approve abc"), None);
        assert_eq!(cmd("/approved abc"), None);
    }

    #[test]
    fn a_task_verdict_names_a_task_and_a_rejection_says_why() {
        let task = |t: &str| TaskCommand::parse(t);
        assert_eq!(
            task(" /accept task-1 "),
            Some(TaskCommand {
                id: "task-1".into(),
                reject: None
            })
        );
        assert_eq!(
            task("/reject@deepbot task-1 the name is wrong"),
            Some(TaskCommand {
                id: "task-1".into(),
                reject: Some("the name is wrong".into())
            })
        );
        assert_eq!(task("/reject task-1"), None, "a rejection says why");
        assert_eq!(task("/accept task-1 now"), None);
        assert_eq!(task("/accept abc"), None, "not a task id");
        assert_eq!(task("/accept"), None);
        assert!(matches!(
            Command::parse("/accept task-9"),
            Some(Command::Task(_))
        ));
        assert!(matches!(
            Command::parse("/deny abc"),
            Some(Command::Approval(_))
        ));
    }

    #[test]
    fn a_new_task_names_its_agent_title_and_acceptance_or_gets_the_usage() {
        let asked = |t: &str| NewTaskCommand::parse(t).map(|c| c.asked);
        assert_eq!(
            asked("/task @coder rename the flag | cargo test passes"),
            Some(Ok(AskedTask {
                assignee: "coder".into(),
                title: "rename the flag".into(),
                acceptance: "cargo test passes".into(),
            }))
        );
        for bad in [
            "/task",
            "/task coder",
            "/task coder rename it",
            "/task coder | x",
            "/task coder x |",
        ] {
            assert!(
                matches!(asked(bad), Some(Err(ref usage)) if usage.starts_with("usage: /task")),
                "{bad}"
            );
        }
        assert_eq!(asked("/tasks coder x | y"), None);
        assert_eq!(asked("please /task coder x | y"), None);
    }
}
