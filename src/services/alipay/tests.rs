//! Contract tests of the Alipay protocol.
