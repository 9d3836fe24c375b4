//! A console client for the in-process tests: signs in through the sign-in form (its
//! pre-session CSRF token and cookie), keeps the session cookie and the session's
//! CSRF token, and never follows redirects (tests look at them).

use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::redirect::Policy;

pub struct ConsoleClient {
    pub base: String,
    pub client: reqwest::Client,
    /// `fl_console=<id>`.
    pub cookie: String,
    pub csrf: String,
}

/// A console answer: status, HTML and the `Location` of a redirect.
#[derive(Debug)]
pub struct Page {
    pub status: u16,
    pub html: String,
    pub location: Option<String>,
    pub set_cookies: Vec<String>,
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

async fn page(r: reqwest::Response) -> Page {
    let status = r.status().as_u16();
    let location = r
        .headers()
        .get(LOCATION)
        .map(|v| v.to_str().unwrap().to_owned());
    let set_cookies = r
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    Page {
        status,
        html: r.text().await.unwrap(),
        location,
        set_cookies,
    }
}

/// The value of the first `name="csrf" value="…"` in a page.
pub fn csrf_in(html: &str) -> Option<String> {
    let at = html.find("name=\"csrf\" value=\"")? + "name=\"csrf\" value=\"".len();
    Some(html[at..].split('"').next()?.to_owned())
}

/// A cookie's `name=value` from `Set-Cookie` headers.
pub fn cookie_in(set_cookies: &[String], name: &str) -> Option<String> {
    set_cookies
        .iter()
        .filter_map(|c| c.split(';').next())
        .find(|kv| kv.starts_with(&format!("{name}=")))
        .map(str::to_owned)
}

impl ConsoleClient {
    /// Sign in with `key`; panics unless the console accepts it.
    pub async fn sign_in(base: &str, key: &str) -> ConsoleClient {
        let (status, page) = Self::try_sign_in(base, key).await;
        assert_eq!(status, 303, "sign-in refused: {}", page.html);
        let cookie = cookie_in(&page.set_cookies, "fl_console").expect("session cookie");
        let mut c = ConsoleClient {
            base: base.to_owned(),
            client: no_redirects(),
            cookie,
            csrf: String::new(),
        };
        let home = c.get("/console").await;
        assert_eq!(home.status, 200, "{}", home.html);
        c.csrf = csrf_in(&home.html).expect("a csrf token on the home page");
        c
    }

    /// The sign-in form's answer (status, page) for `key`.
    pub async fn try_sign_in(base: &str, key: &str) -> (u16, Page) {
        let client = no_redirects();
        let form = page(
            client
                .get(format!("{base}/console/sign-in"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        let pre = cookie_in(&form.set_cookies, "fl_console_pre").expect("pre-session cookie");
        let token = csrf_in(&form.html).expect("sign-in csrf");
        let answer = page(
            client
                .post(format!("{base}/console/sign-in"))
                .header(COOKIE, pre)
                .form(&[("csrf", token.as_str()), ("key", key), ("next", "/console")])
                .send()
                .await
                .unwrap(),
        )
        .await;
        (answer.status, answer)
    }

    pub async fn get(&self, path: &str) -> Page {
        page(
            self.client
                .get(format!("{}{path}", self.base))
                .header(COOKIE, &self.cookie)
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    /// POST a form with this session's CSRF token added.
    pub async fn post(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        let mut all: Vec<(&str, &str)> = fields.to_vec();
        all.push(("csrf", &self.csrf));
        self.post_raw(path, &all).await
    }

    /// POST a form as given (no token added: to test refusals).
    pub async fn post_raw(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        page(
            self.client
                .post(format!("{}{path}", self.base))
                .header(COOKIE, &self.cookie)
                .form(fields)
                .send()
                .await
                .unwrap(),
        )
        .await
    }
}
