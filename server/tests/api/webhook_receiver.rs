//! A webhook receiver: a real local HTTP server that records every
//! delivery (headers and raw body) and answers 200, 500 or a redirect on
//! demand, standing in for an integrator's endpoint.

#![allow(dead_code)]

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicU16, Ordering},
        Arc, Mutex,
    },
};

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    routing::post,
    Router,
};

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    pub event_id: String,
    pub signature: String,
    pub body: Bytes,
    /// What the receiver answered.
    pub status: u16,
}

#[derive(Clone)]
pub struct Receiver {
    pub addr: SocketAddr,
    got: Arc<Mutex<Vec<Received>>>,
    /// The status to answer (302 redirects to `redirect_to`).
    answer: Arc<AtomicU16>,
    redirect_to: Arc<Mutex<String>>,
}

impl Receiver {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let r = Receiver {
            addr: listener.local_addr().expect("addr"),
            got: Arc::default(),
            answer: Arc::new(AtomicU16::new(200)),
            redirect_to: Arc::default(),
        };
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(r.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        r
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// Answer every next request with `status`.
    pub fn answer(&self, status: u16) {
        self.answer.store(status, Ordering::SeqCst);
    }

    /// Answer every next request with a 302 to `url`.
    pub fn redirect(&self, url: &str) {
        *self.redirect_to.lock().expect("lock") = url.to_string();
        self.answer(302);
    }

    pub fn received(&self) -> Vec<Received> {
        self.got.lock().expect("lock").clone()
    }

    /// The requests it acknowledged (answered 2xx).
    pub fn acknowledged(&self) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| (200..300).contains(&r.status))
            .collect()
    }
}

async fn receive(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> impl IntoResponse {
    let status = r.answer.load(Ordering::SeqCst);
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    r.got.lock().expect("lock").push(Received {
        event_id: header("docflow-event-id"),
        signature: header("docflow-signature"),
        body,
        status,
    });
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let mut out = HeaderMap::new();
    if status == 302 {
        if let Ok(v) = r.redirect_to.lock().expect("lock").parse() {
            out.insert("location", v);
        }
    }
    (
        code,
        out,
        if code.is_success() {
            "thanks"
        } else {
            "receiver is down"
        },
    )
}
