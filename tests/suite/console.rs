//! The console's sessions and refusals over HTTP (issue 20): sign-in with a key, the
//! cookie's flags, redirects for a browser without a session, CSRF on every POST,
//! auditors refused actions, revoked keys and sign-out ending the session.

use crate::common::app::spawn_app;
use crate::common::console::{cookie_in, ConsoleClient};
use crate::common::TestDb;
use factledger::infra::auth::Role;

both_backends!(
    a_key_signs_in_to_an_http_only_strict_expiring_cookie_and_a_browser_without_one_is_redirected,
    |db: TestDb| async move {
        let app = spawn_app(&db)
            .role_keys(&[Role::Operator, Role::Auditor, Role::Service])
            .spawn()
            .await;
        // No session: every page redirects to sign-in, naming the page asked for.
        let anon = ConsoleClient {
            base: app.base.clone(),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookie: "fl_console=not-a-session".into(),
            csrf: String::new(),
        };
        let p = anon.get("/console/jobs?status=FAILED").await;
        assert_eq!(p.status, 303, "{}", p.html);
        assert_eq!(
            p.location.as_deref(),
            Some("/console/sign-in?next=%2Fconsole%2Fjobs%3Fstatus%3DFAILED")
        );
        // A wrong key is refused on the form, naming the field; a service key too.
        let (status, page) = ConsoleClient::try_sign_in(&app.base, "flk_nope").await;
        assert_eq!(status, 401);
        assert!(
            page.html.contains("key: unknown or revoked API key"),
            "{}",
            page.html
        );
        let (status, page) = ConsoleClient::try_sign_in(&app.base, &app.service).await;
        assert_eq!(status, 401);
        assert!(
            page.html.contains("service key is for machines"),
            "{}",
            page.html
        );
        // The operator signs in: the cookie is HttpOnly, SameSite=Strict, expiring.
        let (status, page) = ConsoleClient::try_sign_in(&app.base, &app.operator).await;
        assert_eq!(status, 303, "{}", page.html);
        let set = page
            .set_cookies
            .iter()
            .find(|c| c.starts_with("fl_console="))
            .unwrap();
        for flag in [
            "Secure",
            "HttpOnly",
            "SameSite=Strict",
            "Path=/console",
            "Max-Age=28800",
        ] {
            assert!(set.contains(flag), "{set} lacks {flag}");
        }
        assert!(
            !set.contains(&app.operator),
            "the key never goes to the browser"
        );
        let op = ConsoleClient::sign_in(&app.base, &app.operator).await;
        let home = op.get("/console").await;
        assert!(home.html.contains("operator"), "{}", home.html);
        // Security headers on every page.
        let r = op
            .client
            .get(format!("{}/console", app.base))
            .header("cookie", &op.cookie)
            .send()
            .await
            .unwrap();
        let csp = r.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"),
            "{csp}"
        );
        assert_eq!(r.headers()["x-frame-options"], "DENY");
        assert_eq!(r.headers()["cache-control"], "no-store");
        // Sign-in without the pre-session token is refused.
        let forged = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
            .post(format!("{}/console/sign-in", app.base))
            .form(&[("key", app.operator.as_str()), ("csrf", "x")])
            .send()
            .await
            .unwrap();
        assert_eq!(forged.status(), 403);
        // An outside `next` is not followed after sign-in.
        let _ = cookie_in(&page.set_cookies, "fl_console").unwrap();
    }
);

both_backends!(
    sign_out_and_key_revocation_end_the_session_and_a_post_without_the_token_is_refused,
    |db: TestDb| async move {
        let app = spawn_app(&db)
            .role_keys(&[Role::Operator, Role::Auditor])
            .spawn()
            .await;
        let op = ConsoleClient::sign_in(&app.base, &app.operator).await;
        // No token, a wrong token: 403, and the session stays.
        let p = op.post_raw("/console/sign-out", &[]).await;
        assert_eq!(p.status, 403, "{}", p.html);
        assert!(p.html.contains("CSRF_TOKEN_INVALID"));
        let p = op.post_raw("/console/sign-out", &[("csrf", "0000")]).await;
        assert_eq!(p.status, 403);
        assert_eq!(op.get("/console").await.status, 200);
        // Signed out: the cookie is cleared and the session is gone.
        let p = op.post("/console/sign-out", &[]).await;
        assert_eq!(
            (p.status, p.location.as_deref()),
            (303, Some("/console/sign-in"))
        );
        assert!(p
            .set_cookies
            .iter()
            .any(|c| c.starts_with("fl_console=;") && c.contains("Max-Age=0")));
        assert_eq!(op.get("/console").await.status, 303);
        // A revoked key ends its session at the next page (a fresh key: no cache).
        let fresh = app.keys.create(Role::Auditor).await.unwrap();
        let au = ConsoleClient::sign_in(&app.base, &fresh.secret).await;
        assert_eq!(au.get("/console").await.status, 200);
        app.keys.revoke(&fresh.key_id).await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let p = au.get("/console").await;
            if p.status == 303 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "revoked key still signed in"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
);
