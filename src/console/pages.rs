//! The console's handlers. A page without a live session redirects to the login form; an
//! action (every POST) without one, or without the session's CSRF token, or from another
//! origin, is refused `403`. Every read and action goes through the service the CLI uses.

use std::sync::Arc;
use std::time::Instant;

use askama::Template;
use axum::body::Bytes;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde::de::DeserializeOwned;

use super::Console;
use super::auth::{self, Refused};
use super::view::{
    ApprovalCard, ApprovalsPage, AuditPage, AuditQuery, ConversationsPage, Frame, LoginPage,
    OverviewPage, RouteAnswer, RouteForm, RoutesPage, RunsPage, SessionFilter, SessionPage,
};
use crate::approvals::{ApprovalRequest, ListParams};
use crate::hub::operator::{
    HistoryParams, HubAnswer, HubRequest, RejectParams, RunParams, RunsParams, SearchParams,
    SessionsParams, ShowParams, TaskParams, TasksParams,
};

/// The most a console form may be.
const FORM_LIMIT: usize = 64 * 1024;
/// How many lines of a transcript a session page shows.
const TRANSCRIPT_LINES: usize = 200;
/// How many sessions, runs and tasks a list page shows.
const PAGE: usize = 100;

type Shared = Arc<Console>;

/// The session of a page's request (set by [`signed_in`]).
#[derive(Clone)]
struct Signed {
    csrf: String,
}

pub(super) fn routes(console: Shared) -> Router {
    let pages = Router::new()
        .route("/console/", get(overview))
        .route("/console/approvals", get(approvals))
        .route("/console/conversations", get(conversations))
        .route("/console/conversations/session", get(session))
        .route("/console/conversations/live", get(super::live::stream))
        .route("/console/runs", get(runs))
        .route("/console/audit", get(audit))
        .route("/console/audit.json", get(audit_export))
        .route("/console/routes", get(routes_form).post(routes_explain))
        .route_layer(axum::middleware::from_fn_with_state(
            console.clone(),
            signed_in,
        ));
    let actions = Router::new()
        .route("/console/approvals/{id}/decide", post(approval_decide))
        .route("/console/tasks/{id}/{verdict}", post(task_verdict))
        .route("/console/runs/{id}/{verdict}", post(run_verdict))
        .route("/console/logout", post(logout));
    Router::new()
        .route("/", get(|| async { Redirect::to("/console/") }))
        .route("/console", get(|| async { Redirect::to("/console/") }))
        .route("/console/login", get(login_form).post(login))
        .route("/console/assets/console.js", get(script))
        .route("/console/assets/console.css", get(style))
        // Browsers ask for it on every site; the console has none.
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .merge(pages)
        .merge(actions)
        .with_state(console)
}

/// Lets a page through with a live session (its CSRF token rides along for the page's
/// forms); redirects to the login form otherwise. A page POST (the route form) is checked like
/// an action.
async fn signed_in(State(console): State<Shared>, request: Request, next: Next) -> Response {
    let cookie = auth::cookie_of(request.headers());
    match console.sessions.csrf_of(cookie.as_deref(), Instant::now()) {
        Ok(csrf) => {
            let mut request = request;
            request.extensions_mut().insert(Signed { csrf });
            next.run(request).await
        }
        Err(_) if request.method() == axum::http::Method::POST => refused(Refused::NoSession),
        Err(_) => Redirect::to("/console/login").into_response(),
    }
}

fn refused(why: Refused) -> Response {
    error_page(StatusCode::FORBIDDEN, &why.to_string())
}

fn error_page(status: StatusCode, message: &str) -> Response {
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>Refused · deepcli</title><link rel=\"stylesheet\" href=\"/console/assets/console.css\"></head><body><main id=\"main\"><h1>{}</h1><p class=\"error\" role=\"alert\">{}</p><p><a href=\"/console/\">Back to the console</a></p></main></body></html>",
        status.as_u16(),
        askama::filters::escape(message, askama::filters::Html)
            .map(|e| e.to_string())
            .unwrap_or_default()
    );
    (status, Html(body)).into_response()
}

/// A page rendered, or the error that stopped it.
fn render(page: &impl Template) -> Response {
    match page.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => error_page(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the page could not be rendered: {e}"),
        ),
    }
}

/// A POST's form, let through only with the session's CSRF token from the same origin.
struct Posted<T>(T);

/// A request a page of another site made: refused whatever its cookie. A browser says where a
/// request comes from in `Sec-Fetch-Site`; `Origin` is `null` on the console's own forms (its
/// `Referrer-Policy: no-referrer`), so only another origin's name counts against it.
fn other_origin(headers: &HeaderMap) -> bool {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = header("sec-fetch-site")
        && !matches!(site, "same-origin" | "none")
    {
        return true;
    }
    match (
        header(header::ORIGIN.as_str()),
        header(header::HOST.as_str()),
    ) {
        (None | Some("null"), _) => false,
        (Some(origin), Some(host)) => origin != format!("http://{host}"),
        (Some(_), None) => true,
    }
}

impl<T: DeserializeOwned + Send> FromRequest<Shared> for Posted<T> {
    type Rejection = Response;

    async fn from_request(request: Request, console: &Shared) -> Result<Self, Response> {
        if other_origin(request.headers()) {
            return Err(error_page(
                StatusCode::FORBIDDEN,
                "a form from another site is refused: use the console's own pages",
            ));
        }
        let cookie = auth::cookie_of(request.headers());
        let body = axum::body::to_bytes(request.into_body(), FORM_LIMIT)
            .await
            .map_err(|_| {
                error_page(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("the form is over {FORM_LIMIT} bytes"),
                )
            })?;
        let csrf = form_urlencoded::parse(&body)
            .find(|(name, _)| name == "csrf")
            .map(|(_, value)| value.into_owned());
        console
            .sessions
            .check_post(cookie.as_deref(), csrf.as_deref(), Instant::now())
            .map_err(refused)?;
        // A POST: `Form` reads a GET's query instead of its body.
        let form = Request::builder()
            .method(axum::http::Method::POST)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(axum::body::Body::from(body))
            .map_err(|e| error_page(StatusCode::BAD_REQUEST, &e.to_string()))?;
        let axum::Form(value) = axum::Form::<T>::from_request(form, &())
            .await
            .map_err(|e| error_page(StatusCode::BAD_REQUEST, &e.body_text()))?;
        Ok(Posted(value))
    }
}

fn frame(title: &'static str, signed: &Signed) -> Frame {
    Frame {
        title,
        active: title,
        csrf: signed.csrf.clone(),
    }
}

async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("assets/console.js"),
    )
        .into_response()
}

async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("assets/console.css"),
    )
        .into_response()
}

async fn login_form(State(console): State<Shared>, headers: HeaderMap) -> Response {
    let cookie = auth::cookie_of(&headers);
    if console
        .sessions
        .csrf_of(cookie.as_deref(), Instant::now())
        .is_ok()
    {
        return Redirect::to("/console/").into_response();
    }
    render(&LoginPage { error: None })
}

async fn login(State(console): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    if other_origin(&headers) {
        return error_page(
            StatusCode::FORBIDDEN,
            "a login from another site is refused",
        );
    }
    let token = form_urlencoded::parse(&body)
        .find(|(name, _)| name == "token")
        .map(|(_, value)| value.into_owned())
        .unwrap_or_default();
    match console
        .sessions
        .login(&console.sources.token, &token, Instant::now())
    {
        Ok(opened) => (
            StatusCode::SEE_OTHER,
            [
                (header::SET_COOKIE, auth::set_cookie(&opened.cookie)),
                (header::LOCATION, "/console/".to_string()),
            ],
        )
            .into_response(),
        Err(why) => {
            let mut response = render(&LoginPage {
                error: Some(why.to_string()),
            });
            *response.status_mut() = StatusCode::UNAUTHORIZED;
            response
        }
    }
}

#[derive(serde::Deserialize)]
struct CsrfOnly {}

async fn logout(
    State(console): State<Shared>,
    headers: HeaderMap,
    Posted(CsrfOnly {}): Posted<CsrfOnly>,
) -> Response {
    console
        .sessions
        .logout(auth::cookie_of(&headers).as_deref());
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, auth::clear_cookie()),
            (header::LOCATION, "/console/login".to_string()),
        ],
    )
        .into_response()
}

async fn overview(State(console): State<Shared>, Extension(signed): Extension<Signed>) -> Response {
    let o = (console.sources.overview)();
    render(&OverviewPage {
        frame: frame("Overview", &signed),
        o,
    })
}

/// The tasks waiting for a person to accept them.
async fn pending_tasks(console: &Console) -> Result<Vec<crate::hub::tasks::TaskView>, Response> {
    let request = HubRequest::TasksList(TasksParams {
        room: None,
        limit: Some(crate::hub::page::MAX_LIMIT),
    });
    match console.sources.hub.operator(request).await {
        Ok(HubAnswer::Tasks(list)) => Ok(list
            .tasks
            .into_iter()
            .filter(|t| t.state == "pending_acceptance")
            .collect()),
        Ok(_) => Ok(Vec::new()),
        Err(e) => Err(hub_error(&e)),
    }
}

fn hub_error(e: &crate::hub::operator::OperatorError) -> Response {
    use crate::hub::operator::OperatorError as E;
    let status = match e {
        E::NoMethod(_) | E::NotFound(_) => StatusCode::NOT_FOUND,
        E::Params(_) => StatusCode::BAD_REQUEST,
        E::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error_page(status, &e.to_string())
}

fn approval_error(e: &crate::approvals::ApprovalError) -> Response {
    use crate::approvals::ApprovalError as E;
    let status = match e {
        E::NotFound(_) | E::NoRule(_) => StatusCode::NOT_FOUND,
        E::NotPending { .. } | E::Voided { .. } => StatusCode::CONFLICT,
        E::Refused(_) => StatusCode::FORBIDDEN,
        E::Params(_) => StatusCode::BAD_REQUEST,
        E::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error_page(status, &e.to_string())
}

async fn approvals(
    State(console): State<Shared>,
    Extension(signed): Extension<Signed>,
) -> Response {
    let listed = console
        .sources
        .approvals
        .operator(ApprovalRequest::List(ListParams::default()))
        .await;
    let approvals = match listed {
        Ok(answer) => ApprovalCard::of_answer(&answer),
        Err(e) => return approval_error(&e),
    };
    let tasks = match pending_tasks(&console).await {
        Ok(tasks) => tasks,
        Err(refused) => return refused,
    };
    render(&ApprovalsPage {
        frame: frame("Approvals", &signed),
        approvals,
        tasks,
    })
}

#[derive(serde::Deserialize)]
struct Decision {
    verdict: String,
}

/// Approve, Always or Deny, as the operator (`approvals/approve|deny`).
async fn approval_decide(
    State(console): State<Shared>,
    Path(id): Path<String>,
    Posted(decision): Posted<Decision>,
) -> Response {
    let params = |always| crate::approvals::DecideParams {
        id: id.clone(),
        always,
        pattern: None,
        dry_run: false,
    };
    let request = match decision.verdict.as_str() {
        "approve" => ApprovalRequest::Approve(params(false)),
        "always" => ApprovalRequest::Approve(params(true)),
        "deny" => ApprovalRequest::Deny(params(false)),
        other => {
            return error_page(
                StatusCode::BAD_REQUEST,
                &format!("no verdict `{other}`: approve, always or deny"),
            );
        }
    };
    match console.sources.approvals.operator(request).await {
        Ok(_) => Redirect::to("/console/approvals").into_response(),
        Err(e) => approval_error(&e),
    }
}

#[derive(serde::Deserialize)]
struct Reason {
    #[serde(default)]
    reason: String,
}

/// Accept or Reject (with a reason) a task, as the operator (`tasks/accept|reject`).
async fn task_verdict(
    State(console): State<Shared>,
    Path((id, verdict)): Path<(String, String)>,
    Posted(form): Posted<Reason>,
) -> Response {
    let request = match verdict.as_str() {
        "accept" => HubRequest::TasksAccept(TaskParams { task_id: id }),
        "reject" if form.reason.trim().is_empty() => {
            return error_page(
                StatusCode::BAD_REQUEST,
                "a rejection needs a reason: the assignee is told it",
            );
        }
        "reject" => HubRequest::TasksReject(RejectParams {
            task_id: id,
            reason: form.reason,
            close: false,
        }),
        other => {
            return error_page(
                StatusCode::NOT_FOUND,
                &format!("no `{other}` on a task: accept or reject"),
            );
        }
    };
    match console.sources.hub.operator(request).await {
        Ok(_) => Redirect::to("/console/approvals").into_response(),
        Err(e) => hub_error(&e),
    }
}

/// Resume or Stop a run a loop pause holds (`runs/resume|stop`).
async fn run_verdict(
    State(console): State<Shared>,
    Path((id, verdict)): Path<(String, String)>,
    Posted(CsrfOnly {}): Posted<CsrfOnly>,
) -> Response {
    let p = RunParams { run_id: id };
    let request = match verdict.as_str() {
        "resume" => HubRequest::RunsResume(p),
        "stop" => HubRequest::RunsStop(p),
        other => {
            return error_page(
                StatusCode::NOT_FOUND,
                &format!("no `{other}` on a run: resume or stop"),
            );
        }
    };
    match console.sources.hub.operator(request).await {
        Ok(_) => Redirect::to("/console/runs").into_response(),
        Err(e) => hub_error(&e),
    }
}

fn some(text: &str) -> Option<String> {
    Some(text.trim())
        .filter(|t| !t.is_empty())
        .map(str::to_string)
}

async fn conversations(
    State(console): State<Shared>,
    Extension(signed): Extension<Signed>,
    Query(filter): Query<SessionFilter>,
) -> Response {
    let frame_of = || frame("Conversations", &signed);
    if let Some(text) = some(&filter.text) {
        let search = HubRequest::SessionsSearch(SearchParams {
            text,
            limit: Some(PAGE),
            cursor: some(&filter.cursor),
        });
        return match console.sources.hub.operator(search).await {
            Ok(HubAnswer::Search(found)) => {
                render(&ConversationsPage::of_search(frame_of(), filter, found))
            }
            Ok(_) => error_page(StatusCode::INTERNAL_SERVER_ERROR, "not a search"),
            Err(e) => hub_error(&e),
        };
    }
    let params = SessionsParams {
        agent_id: some(&filter.agent),
        kind: some(&filter.kind),
        contains: some(&filter.q),
        limit: Some(PAGE),
        cursor: some(&filter.cursor),
    };
    match console.sources.hub.operator_sessions(params).await {
        Ok(list) => render(&ConversationsPage::of(frame_of(), filter, list)),
        Err(e) => hub_error(&e),
    }
}

#[derive(serde::Deserialize)]
struct KeyQuery {
    #[serde(default)]
    key: String,
}

async fn session(
    State(console): State<Shared>,
    Extension(signed): Extension<Signed>,
    Query(q): Query<KeyQuery>,
) -> Response {
    let key = q.key.trim().to_string();
    if key.is_empty() {
        return error_page(
            StatusCode::BAD_REQUEST,
            "which session? `key` is empty (agent:main:main, say)",
        );
    }
    let hub = &console.sources.hub;
    let detail = match hub
        .operator(HubRequest::SessionsShow(ShowParams {
            session_key: key.clone(),
            prompt: false,
        }))
        .await
    {
        Ok(HubAnswer::Session(detail)) => detail,
        Ok(_) => return error_page(StatusCode::INTERNAL_SERVER_ERROR, "not a session"),
        Err(e) => return hub_error(&e),
    };
    let history = match hub
        .operator(HubRequest::SessionsHistory(HistoryParams {
            session_key: key,
            limit: Some(TRANSCRIPT_LINES),
            cursor: None,
            all: false,
        }))
        .await
    {
        Ok(HubAnswer::History(history)) => history,
        Ok(_) => return error_page(StatusCode::INTERNAL_SERVER_ERROR, "not a history"),
        Err(e) => return hub_error(&e),
    };
    render(&SessionPage::of(
        frame("Conversations", &signed),
        detail,
        history,
    ))
}

async fn runs(State(console): State<Shared>, Extension(signed): Extension<Signed>) -> Response {
    let hub = &console.sources.hub;
    let runs = match hub
        .operator_runs(RunsParams {
            limit: Some(crate::hub::page::MAX_LIMIT),
            ..RunsParams::default()
        })
        .await
    {
        Ok(list) => list.runs,
        Err(e) => return hub_error(&e),
    };
    let tasks = match hub
        .operator(HubRequest::TasksList(TasksParams {
            room: None,
            limit: Some(PAGE),
        }))
        .await
    {
        Ok(HubAnswer::Tasks(list)) => list.tasks,
        Ok(_) => Vec::new(),
        Err(e) => return hub_error(&e),
    };
    render(&RunsPage::of(
        frame("Runs and tasks", &signed),
        &runs,
        tasks,
    ))
}

/// The audit filter of a query, as `GET /v1/audit` makes it.
fn audit_filter(q: &AuditQuery) -> Result<crate::state::audit::AuditFilter, String> {
    let since = match some(&q.since) {
        None => None,
        Some(s) => Some(crate::state::audit::parse_since(&s)?),
    };
    Ok(crate::state::audit::AuditFilter {
        agent_id: some(&q.agent_id),
        session_key: some(&q.session_key),
        run_id: some(&q.run_id),
        task_id: some(&q.task_id),
        since,
        limit: None,
    })
}

/// The audit page's `since` when no filter is given: the last day (the whole timeline is a
/// filter away, and reads every source from the start).
const AUDIT_SINCE: &str = "24h";

async fn audit(
    State(console): State<Shared>,
    Extension(signed): Extension<Signed>,
    Query(q): Query<AuditQuery>,
    uri: axum::http::Uri,
) -> Response {
    let mut q = q;
    if uri.query().is_none_or(str::is_empty) {
        q.since = AUDIT_SINCE.into();
    }
    let filter = match audit_filter(&q) {
        Ok(filter) => filter,
        Err(why) => return error_page(StatusCode::BAD_REQUEST, &why),
    };
    match console.sources.hub.audit(filter).await {
        Ok(timeline) => render(&AuditPage {
            frame: frame("Audit", &signed),
            export: format!("/console/audit.json?{}", q.query()),
            filter: q,
            events: timeline.events,
        }),
        Err(e) => error_page(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// The timeline as `GET /v1/audit` answers it, as a file.
async fn audit_export(State(console): State<Shared>, Query(q): Query<AuditQuery>) -> Response {
    let filter = match audit_filter(&q) {
        Ok(filter) => filter,
        Err(why) => return error_page(StatusCode::BAD_REQUEST, &why),
    };
    match console.sources.hub.audit(filter).await {
        Ok(timeline) => (
            [(
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"audit.json\"",
            )],
            axum::Json(timeline),
        )
            .into_response(),
        Err(e) => error_page(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

async fn routes_form(Extension(signed): Extension<Signed>) -> Response {
    render(&RoutesPage {
        frame: frame("Routes", &signed),
        form: RouteForm::default(),
        error: None,
        result: None,
    })
}

async fn routes_explain(
    State(console): State<Shared>,
    Extension(signed): Extension<Signed>,
    Posted(form): Posted<RouteForm>,
) -> Response {
    let (result, error) = match (form.input(), console.sources.access.plan()) {
        (Err(why), _) => (None, Some(why)),
        (Ok(_), None) => (
            None,
            Some("no routing plan is in force yet: the first apply has not finished".into()),
        ),
        (Ok(input), Some(plan)) => (
            Some(RouteAnswer::of(
                &plan.routing,
                &plan.policy,
                plan.generation,
                &input,
                &form,
            )),
            None,
        ),
    };
    let status = if error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let mut response = render(&RoutesPage {
        frame: frame("Routes", &signed),
        form,
        error,
        result,
    });
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, value.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_form_from_another_site_is_told_apart_from_the_consoles_own() {
        let host = ("host", "127.0.0.1:7430");
        // The console's own forms: no-referrer makes their Origin `null`.
        for own in [
            headers(&[host]),
            headers(&[host, ("origin", "null"), ("sec-fetch-site", "same-origin")]),
            headers(&[host, ("origin", "http://127.0.0.1:7430")]),
        ] {
            assert!(!other_origin(&own), "{own:?}");
        }
        for other in [
            headers(&[host, ("origin", "http://evil.example")]),
            headers(&[host, ("origin", "null"), ("sec-fetch-site", "cross-site")]),
            headers(&[host, ("sec-fetch-site", "same-site")]),
            headers(&[("origin", "http://127.0.0.1:7430")]),
        ] {
            assert!(other_origin(&other), "{other:?}");
        }
    }
}
