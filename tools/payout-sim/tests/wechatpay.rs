//! The WeChat Pay mode's refund API refuses an unsigned or wrongly signed request
//! with 401 `SIGN_ERROR`, and signs even its refusals with the platform key it
//! minted (the headers factledger verifies).

use payout_sim::gateway::wechatpay::WechatPaySetup;
use payout_sim::SimConfig;
use rsa::pkcs8::{EncodePublicKey, LineEnding};

#[tokio::test]
async fn an_unsigned_refund_request_is_refused_sign_error_in_a_signed_answer() {
    let sim = payout_sim::spawn(SimConfig::default()).await.expect("sim");
    let merchant = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).expect("key");
    let platform = sim
        .gateway()
        .enable_wechatpay(WechatPaySetup {
            mchid: "1230000109".into(),
            appid: "wxd678efh567hg6787".into(),
            apiv3_key: "0123456789abcdefghijABCDEFGHIJ01".into(),
            merchant_serial: "1DDE55AD98ED71D6EDD4A4A16996DE7B47773A8C".into(),
            merchant_public_key_pem: merchant
                .to_public_key()
                .to_public_key_pem(LineEnding::LF)
                .expect("pem"),
        })
        .expect("mode");
    assert_eq!(platform.serial.len(), 40);
    let client = reqwest::Client::new();
    let url = format!("{}/v3/refund/domestic/refunds", sim.base_url());
    for authorization in [
        None,
        Some("WECHATPAY2-SHA256-RSA2048 mchid=\"1230000109\",nonce_str=\"N\",signature=\"AAAA\",timestamp=\"1\",serial_no=\"1DDE55AD98ED71D6EDD4A4A16996DE7B47773A8C\""),
    ] {
        let mut request = client.post(&url).body("{}");
        if let Some(a) = authorization {
            request = request.header("authorization", a);
        }
        let response = request.send().await.expect("send");
        assert_eq!(response.status().as_u16(), 401);
        for h in ["wechatpay-timestamp", "wechatpay-nonce", "wechatpay-signature"] {
            assert!(response.headers().contains_key(h), "{h}");
        }
        assert_eq!(
            response.headers()["wechatpay-serial"].to_str().expect("serial"),
            platform.serial
        );
        let body: serde_json::Value = response.json().await.expect("json");
        assert_eq!(body["code"], "SIGN_ERROR", "{body}");
    }
    assert_eq!(sim.gateway().requests().unauthorized, 2);
}
