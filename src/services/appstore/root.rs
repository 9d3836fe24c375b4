//! Apple Root CA - G3, the root every App Store JWS chains to, pinned in the binary.
//!
//! Public text from <https://www.apple.com/certificateauthority/AppleRootCA-G3.cer>
//! (the same bytes Apple's app-store-server-library-python carries as
//! `REAL_APPLE_ROOT_BASE64_ENCODED` in `tests/test_x509_verifiction.py`): P-384,
//! self-signed, valid 2014-04-30 to 2039-04-30, SHA-256 fingerprint
//! [`APPLE_ROOT_CA_G3_SHA256`]. Configuration may pin another root instead
//! (`FACTLEDGER_APPSTORE_ROOT_CERT_FILE`): the simulator's, in tests.

use base64::Engine as _;

/// Apple Root CA - G3, DER as standard base64.
pub const APPLE_ROOT_CA_G3_B64: &str = concat!(
    "MIICQzCCAcmgAwIBAgIILcX8iNLFS5UwCgYIKoZIzj0EAwMwZzEbMBkGA1UEAwwS",
    "QXBwbGUgUm9vdCBDQSAtIEczMSYwJAYDVQQLDB1BcHBsZSBDZXJ0aWZpY2F0aW9u",
    "IEF1dGhvcml0eTETMBEGA1UECgwKQXBwbGUgSW5jLjELMAkGA1UEBhMCVVMwHhcN",
    "MTQwNDMwMTgxOTA2WhcNMzkwNDMwMTgxOTA2WjBnMRswGQYDVQQDDBJBcHBsZSBS",
    "b290IENBIC0gRzMxJjAkBgNVBAsMHUFwcGxlIENlcnRpZmljYXRpb24gQXV0aG9y",
    "aXR5MRMwEQYDVQQKDApBcHBsZSBJbmMuMQswCQYDVQQGEwJVUzB2MBAGByqGSM49",
    "AgEGBSuBBAAiA2IABJjpLz1AcqTtkyJygRMc3RCV8cWjTnHcFBbZDuWmBSp3ZHtf",
    "TjjTuxxEtX/1H7YyYl3J6YRbTzBPEVoA/VhYDKX1DyxNB0cTddqXl5dvMVztK517",
    "IDvYuVTZXpmkOlEKMaNCMEAwHQYDVR0OBBYEFLuw3qFYM4iapIqZ3r6966/ayySr",
    "MA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgEGMAoGCCqGSM49BAMDA2gA",
    "MGUCMQCD6cHEFl4aXTQY2e3v9GwOAEZLuN+yRhHFD/3meoyhpmvOwgPUnPWTxnS4",
    "at+qIxUCMG1mihDK1A3UT82NQz60imOlM27jbdoXt2QfyFMm+YhidDkLF1vLUagM",
    "6BgD56KyKA==",
);

/// Its SHA-256 fingerprint, as Apple publishes it (checked by a test).
pub const APPLE_ROOT_CA_G3_SHA256: &str =
    "63343abfb89a6a03ebb57e9b3f5fa7be7c4f5c756f3017b3a8c488c3653e9179";

/// The pinned root's DER.
pub fn apple_root_ca_g3() -> Vec<u8> {
    // A constant that decodes (the fingerprint test proves it): never empty in practice;
    // an empty root would only ever refuse every chain.
    base64::engine::general_purpose::STANDARD
        .decode(APPLE_ROOT_CA_G3_B64)
        .unwrap_or_default()
}
