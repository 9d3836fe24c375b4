//! Where `serve` reads provider secrets and provider choices (issue 33 item 6).
//!
//! **Secrets** (API keys, private keys, callback tokens) come from the environment or
//! from a file, never from the command line (`ps` and shell history show arguments):
//! `NAME` holds the value, or `NAME_FILE` the path of a file holding it (a mounted
//! secret; one trailing newline is dropped). A partitioned service looks for the
//! partition's own first — `NAME_<CODE>` / `NAME_<CODE>_FILE` (e.g.
//! `FACTLEDGER_WECHATPAY_MCHID_CN`) — then the shared one. Both a value and a file for
//! one name is refused as ambiguous; an empty value or file is refused, naming it. A
//! [`SecretText`] never prints its value.
//!
//! **Choices** (`--gateway`, `--payout-provider`) name one provider for every
//! partition (`wechatpay`) or one per partition (`CN=wechatpay;ID=paysim`, `-` for
//! none), since countries differ in who pays and collects.

use anyhow::{bail, Context};
use std::collections::BTreeMap;

/// A secret's text: `Debug` shows only its length.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretText(String);

impl SecretText {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretText({} bytes)", self.0.len())
    }
}

/// Reads secrets for one partition (or an unpartitioned service).
pub struct Secrets<'a> {
    partition: Option<&'a str>,
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

/// The process environment.
pub fn env_lookup(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl<'a> Secrets<'a> {
    pub fn new(partition: Option<&'a str>, lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Secrets { partition, lookup }
    }

    /// The names looked at for `name`, most specific first.
    fn candidates(&self, name: &str) -> Vec<String> {
        match self.partition {
            Some(code) => vec![format!("{name}_{code}"), name.to_owned()],
            None => vec![name.to_owned()],
        }
    }

    /// A variable as the partition sees it: `NAME_<CODE>` (for `NAME_FILE`:
    /// `NAME_<CODE>_FILE`) first, then `NAME`. For a provider's own config loader,
    /// which reads `NAME` and `NAME_FILE` itself.
    pub fn lookup(&self, name: &str) -> Option<String> {
        let own = self.partition.map(|code| match name.strip_suffix("_FILE") {
            Some(stem) => format!("{stem}_{code}_FILE"),
            None => format!("{name}_{code}"),
        });
        own.and_then(|n| (self.lookup)(&n))
            .or_else(|| (self.lookup)(name))
    }

    /// `name`'s value, or `None` when neither it nor its file is set.
    pub fn optional(&self, name: &str) -> anyhow::Result<Option<SecretText>> {
        for n in self.candidates(name) {
            let file_var = format!("{n}_FILE");
            let value = (self.lookup)(&n);
            let file = (self.lookup)(&file_var);
            let text = match (value, file) {
                (None, None) => continue,
                (Some(_), Some(_)) => {
                    bail!("{n} and {file_var} are both set: set one (the value or its file)")
                }
                (Some(v), None) => {
                    if v.trim().is_empty() {
                        bail!("{n} is set but empty");
                    }
                    v
                }
                (None, Some(path)) => {
                    let text = std::fs::read_to_string(&path)
                        .with_context(|| format!("{file_var}: cannot read {path}"))?;
                    let text = text
                        .strip_suffix("\r\n")
                        .or_else(|| text.strip_suffix('\n'))
                        .unwrap_or(&text)
                        .to_owned();
                    if text.trim().is_empty() {
                        bail!("{file_var}: {path} is empty");
                    }
                    text
                }
            };
            return Ok(Some(SecretText(text)));
        }
        Ok(None)
    }

    /// `name`'s value; missing is an error that names it and what needs it.
    pub fn required(&self, name: &str, needed_by: &str) -> anyhow::Result<SecretText> {
        self.optional(name)?.with_context(|| {
            let names = self
                .candidates(name)
                .iter()
                .map(|n| format!("{n} (or {n}_FILE)"))
                .collect::<Vec<_>>()
                .join(" or ");
            format!("{needed_by} needs {names} in the environment")
        })
    }
}

/// A provider choice: one for all partitions, or one per partition code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    All(Option<String>),
    PerPartition(BTreeMap<String, Option<String>>),
}

impl Choice {
    /// Parse `flag`'s value: `NAME` or `CODE=NAME;CODE=NAME` (`-` or `none`: none).
    /// `allowed` are the provider names; the error names the flag and the rule.
    pub fn parse(flag: &str, text: &str, allowed: &[&str]) -> anyhow::Result<Choice> {
        let one = |name: &str| -> anyhow::Result<Option<String>> {
            match name.trim() {
                "" => bail!(
                    "{flag}: an empty provider name (one of {})",
                    allowed.join(", ")
                ),
                "-" | "none" => Ok(None),
                n if allowed.contains(&n) => Ok(Some(n.to_owned())),
                n => bail!(
                    "{flag}: unknown provider {n:?} (one of {}, or - for none)",
                    allowed.join(", ")
                ),
            }
        };
        if !text.contains('=') {
            return Ok(Choice::All(one(text)?));
        }
        let mut map = BTreeMap::new();
        for entry in text.split(';').filter(|e| !e.trim().is_empty()) {
            let Some((code, name)) = entry.split_once('=') else {
                bail!("{flag}: {entry:?} is not CODE=PROVIDER (entries separated by ;)");
            };
            let code = code.trim();
            if code.len() != 2 || !code.bytes().all(|b| b.is_ascii_uppercase()) {
                bail!("{flag}: {code:?} is not a partition code (two upper-case letters)");
            }
            if map.insert(code.to_owned(), one(name)?).is_some() {
                bail!("{flag}: partition {code} is named twice");
            }
        }
        Ok(Choice::PerPartition(map))
    }

    /// The provider of `partition` (`None` for an unpartitioned service). A per-
    /// partition choice without this partition is none; an unpartitioned service with
    /// a per-partition choice is an error.
    pub fn of(&self, flag: &str, partition: Option<&str>) -> anyhow::Result<Option<String>> {
        match (self, partition) {
            (Choice::All(c), _) => Ok(c.clone()),
            (Choice::PerPartition(map), Some(code)) => Ok(map.get(code).cloned().flatten()),
            (Choice::PerPartition(_), None) => bail!(
                "{flag}: a per-partition choice (CODE=PROVIDER) needs --partitions; name one \
                 provider instead"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn a_secret_comes_from_the_partition_s_variable_then_the_shared_one_then_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "from-file\n").unwrap();
        let path = file.to_str().unwrap().to_owned();
        let env = vars(&[
            ("K", "shared"),
            ("K_CN", "china"),
            ("F_FILE", path.as_str()),
        ]);
        let cn = Secrets::new(Some("CN"), &env);
        let id = Secrets::new(Some("ID"), &env);
        let plain = Secrets::new(None, &env);
        assert_eq!(cn.required("K", "x").unwrap().expose(), "china");
        assert_eq!(id.required("K", "x").unwrap().expose(), "shared");
        assert_eq!(plain.required("K", "x").unwrap().expose(), "shared");
        assert_eq!(plain.required("F", "x").unwrap().expose(), "from-file");
        assert_eq!(plain.optional("NOPE").unwrap(), None);
        // A provider's loader sees the partition's variables under the shared names.
        let env = vars(&[("K_CN", "china"), ("K", "shared"), ("P_CN_FILE", "/cn")]);
        let cn = Secrets::new(Some("CN"), &env);
        assert_eq!(cn.lookup("K").as_deref(), Some("china"));
        assert_eq!(cn.lookup("P_FILE").as_deref(), Some("/cn"));
        assert_eq!(
            Secrets::new(Some("ID"), &env).lookup("K").as_deref(),
            Some("shared")
        );
    }

    #[test]
    fn a_missing_empty_or_ambiguous_secret_is_refused_naming_the_variable() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let empty = empty.to_str().unwrap().to_owned();
        let env = vars(&[
            ("E", "  "),
            ("B", "v"),
            ("B_FILE", "/x"),
            ("EF_FILE", empty.as_str()),
            ("GONE_FILE", "/nonexistent/secret"),
        ]);
        let s = Secrets::new(Some("CN"), &env);
        for (name, says) in [
            (
                "MISSING",
                "--gateway wechatpay needs MISSING_CN (or MISSING_CN_FILE) or MISSING",
            ),
            ("E", "E is set but empty"),
            ("B", "B and B_FILE are both set"),
            ("EF", "EF_FILE: "),
            ("GONE", "GONE_FILE: cannot read /nonexistent/secret"),
        ] {
            let e = format!("{:#}", s.required(name, "--gateway wechatpay").unwrap_err());
            assert!(e.contains(says), "{name}: {e}");
        }
    }

    #[test]
    fn a_secret_never_prints_its_value() {
        let env = vars(&[("K", "hunter2")]);
        let secret = Secrets::new(None, &env).required("K", "x").unwrap();
        assert!(!format!("{secret:?}").contains("hunter2"));
    }

    #[test]
    fn a_choice_is_one_provider_or_one_per_partition() {
        let allowed = ["paysim", "wechatpay", "alipay"];
        let all = Choice::parse("--gateway", "wechatpay", &allowed).unwrap();
        assert_eq!(
            all.of("--gateway", Some("CN")).unwrap().as_deref(),
            Some("wechatpay")
        );
        assert_eq!(
            all.of("--gateway", None).unwrap().as_deref(),
            Some("wechatpay")
        );
        let per = Choice::parse("--gateway", "CN=wechatpay; ID=paysim;PH=-", &allowed).unwrap();
        assert_eq!(
            per.of("--gateway", Some("CN")).unwrap().as_deref(),
            Some("wechatpay")
        );
        assert_eq!(
            per.of("--gateway", Some("ID")).unwrap().as_deref(),
            Some("paysim")
        );
        assert_eq!(per.of("--gateway", Some("PH")).unwrap(), None);
        assert_eq!(per.of("--gateway", Some("TH")).unwrap(), None);
        assert!(per.of("--gateway", None).is_err());
        for (bad, says) in [
            ("stripe", "unknown provider \"stripe\""),
            ("CN=stripe", "unknown provider"),
            ("cn=alipay", "not a partition code"),
            ("CN=alipay;CN=paysim", "named twice"),
            ("CN=alipay;ID", "not CODE=PROVIDER"),
            ("", "empty provider name"),
        ] {
            let e = Choice::parse("--gateway", bad, &allowed)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says) && e.starts_with("--gateway"), "{bad}: {e}");
        }
    }
}
