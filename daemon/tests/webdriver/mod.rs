//! A minimal W3C WebDriver client over `ureq`, driving Debian's `chromium` through
//! `chromedriver` headless. Enough for the workbench tests: navigate, find, type, click, read
//! text, run a script, resize, screenshot.
//!
//! When the browser or its driver is missing the tests skip with a loud message, unless
//! `WORLD_REQUIRE_BROWSER` is set (CI sets it): then they fail.
#![allow(dead_code)]

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

/// The W3C name of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How long a `wait_for` condition may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(20);

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

/// The browser and driver binaries: `$WORLD_CHROMIUM` / `$WORLD_CHROMEDRIVER`, else Debian's.
fn binaries() -> Option<(PathBuf, PathBuf)> {
    // A variable that is set names the only candidate: a wrong path means "not installed".
    if let Some(p) = std::env::var_os("WORLD_CHROMIUM") {
        let d = std::env::var_os("WORLD_CHROMEDRIVER").map(PathBuf::from);
        let (b, d) = (PathBuf::from(p), d.or_else(|| which("chromedriver"))?);
        return (b.is_file() && d.is_file()).then_some((b, d));
    }
    if let Some(d) = std::env::var_os("WORLD_CHROMEDRIVER") {
        let d = PathBuf::from(d);
        if !d.is_file() {
            return None;
        }
    }
    let browser = None
        // The real binary, not the launcher script (which adds flags and warnings of its own).
        .or_else(|| Some(PathBuf::from("/usr/lib/chromium/chromium")).filter(|p| p.is_file()))
        .or_else(|| which("chromium"))
        .or_else(|| which("chromium-browser"))?;
    let driver = std::env::var_os("WORLD_CHROMEDRIVER")
        .map(PathBuf::from)
        .or_else(|| which("chromedriver"))
        .or_else(|| {
            Some(PathBuf::from("/usr/lib/chromium/chromedriver")).filter(|p| p.is_file())
        })?;
    Some((browser, driver))
}

pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    agent: ureq::Agent,
    _profile: tempfile::TempDir,
}

/// A found element.
#[derive(Debug, Clone)]
pub struct Element(String);

impl Browser {
    /// Start chromedriver and a headless Chromium at `width`x`height`; `None` (after a loud
    /// message) when they are not installed and `WORLD_REQUIRE_BROWSER` is unset.
    pub fn start_or_skip(test: &str, width: u32, height: u32) -> Option<Browser> {
        let Some((browser, driver)) = binaries() else {
            if std::env::var_os("WORLD_REQUIRE_BROWSER").is_some() {
                panic!("{test}: WORLD_REQUIRE_BROWSER is set but chromium or chromedriver is not installed (apt-get install chromium chromium-driver)");
            }
            // Straight to the process's stderr: the test harness captures `eprintln!`.
            let _ = writeln!(
                std::io::stderr(),
                "\n*** SKIPPED {test}: chromium and chromedriver are not installed (apt-get install chromium chromium-driver); set WORLD_REQUIRE_BROWSER=1 to make this a failure ***\n"
            );
            return None;
        };
        Some(Browser::start(&browser, &driver, width, height))
    }

    fn start(browser: &Path, driver: &Path, width: u32, height: u32) -> Browser {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", driver.display()));
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(60))
            .build();
        let base = format!("http://127.0.0.1:{port}");
        let until = Instant::now() + WAIT;
        loop {
            if let Ok(r) = agent.get(&format!("{base}/status")).call() {
                let v: Value = serde_json::from_str(&r.into_string().unwrap()).unwrap();
                if v["value"]["ready"] == json!(true) {
                    break;
                }
            }
            assert!(Instant::now() < until, "chromedriver did not become ready");
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = tempfile::tempdir().unwrap();
        // The network is closed: without these flags Chromium waits on background requests.
        let args = [
            "--headless=new".to_owned(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-extensions".into(),
            "--disable-default-apps".into(),
            "--no-first-run".into(),
            "--no-default-browser-check".into(),
            "--hide-scrollbars".into(),
            "--force-device-scale-factor=1".into(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": browser, "args": args},
        }}});
        let mut b = Browser {
            driver: child,
            base,
            session: String::new(),
            agent,
            _profile: profile,
        };
        let v = b.raw("POST", "/session", Some(caps));
        b.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {v}"))
            .to_owned();
        b.viewport(width, height);
        b
    }

    /// One WebDriver command; the `value` of its answer. Panics on a WebDriver error.
    fn raw(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        match self.try_raw(method, path, body) {
            Ok(v) => v,
            Err(e) => panic!("webdriver {method} {path}: {e}"),
        }
    }

    fn try_raw(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, Value> {
        let url = format!("{}{path}", self.base);
        let req = self.agent.request(method, &url);
        let res = match body {
            Some(b) => req
                .set("Content-Type", "application/json")
                .send_string(&b.to_string()),
            None => req.call(),
        };
        let (ok, text) = match res {
            Ok(r) => (true, r.into_string().unwrap()),
            Err(ureq::Error::Status(_, r)) => (false, r.into_string().unwrap()),
            Err(e) => panic!("webdriver {method} {path}: {e}"),
        };
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if ok {
            Ok(v["value"].clone())
        } else {
            Err(v["value"].clone())
        }
    }

    fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.raw(method, &format!("/session/{}{path}", self.session), body)
    }

    pub fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })));
    }

    pub fn try_find(&self, css: &str) -> Option<Element> {
        self.try_raw(
            "POST",
            &format!("/session/{}/element", self.session),
            Some(json!({"using": "css selector", "value": css})),
        )
        .ok()
        .and_then(|v| v[ELEMENT].as_str().map(|s| Element(s.to_owned())))
    }

    pub fn find(&self, css: &str) -> Element {
        self.try_find(css)
            .unwrap_or_else(|| panic!("no element matches {css:?}"))
    }

    pub fn find_all(&self, css: &str) -> Vec<Element> {
        let v = self.cmd(
            "POST",
            "/elements",
            Some(json!({"using": "css selector", "value": css})),
        );
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e[ELEMENT].as_str().map(|s| Element(s.to_owned())))
            .collect()
    }

    pub fn type_into(&self, e: &Element, text: &str) {
        self.cmd(
            "POST",
            &format!("/element/{}/value", e.0),
            Some(json!({ "text": text })),
        );
    }

    pub fn click(&self, e: &Element) {
        self.cmd("POST", &format!("/element/{}/click", e.0), Some(json!({})));
    }

    /// The rendered text of an element.
    pub fn text(&self, e: &Element) -> String {
        self.cmd("GET", &format!("/element/{}/text", e.0), None)
            .as_str()
            .unwrap_or("")
            .to_owned()
    }

    /// The rendered text of the first element matching `css`, if any (read in the page, so an
    /// element replaced meanwhile is never a stale reference).
    pub fn text_of(&self, css: &str) -> Option<String> {
        self.exec(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
            json!([css]),
        )
        .as_str()
        .map(str::to_owned)
    }

    pub fn attr(&self, e: &Element, name: &str) -> Option<String> {
        self.cmd("GET", &format!("/element/{}/attribute/{name}", e.0), None)
            .as_str()
            .map(str::to_owned)
    }

    /// Send keys to the focused element (e.g. "j", "\u{E007}" for Enter).
    pub fn keys(&self, text: &str) {
        let actions: Vec<Value> = text
            .chars()
            .flat_map(|c| {
                [
                    json!({"type": "keyDown", "value": c.to_string()}),
                    json!({"type": "keyUp", "value": c.to_string()}),
                ]
            })
            .collect();
        self.cmd(
            "POST",
            "/actions",
            Some(json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]})),
        );
    }

    /// Run `script` (a function body; `arguments` holds `args`) in the page.
    pub fn exec(&self, script: &str, args: Value) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// Run `script` asynchronously: it ends by calling `arguments[arguments.length - 1]`.
    pub fn exec_async(&self, script: &str, args: Value) -> Value {
        self.cmd(
            "POST",
            "/execute/async",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// Make the viewport exactly `width`x`height` CSS pixels at scale 1 (a window cannot be
    /// narrower than 500 pixels, and its frame eats some of its height).
    pub fn viewport(&self, width: u32, height: u32) {
        self.cmd(
            "POST",
            "/goog/cdp/execute",
            Some(
                json!({"cmd": "Emulation.setDeviceMetricsOverride", "params": {
                    "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false,
                }}),
            ),
        );
    }

    /// Save a PNG of the viewport.
    pub fn screenshot(&self, path: &Path) {
        let v = self.cmd("GET", "/screenshot", None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap())
            .unwrap();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }

    /// Poll `probe` until it answers `Some`, failing after [`WAIT`] with `what` and the page's
    /// text.
    pub fn wait_for<T>(&self, what: &str, mut probe: impl FnMut(&Browser) -> Option<T>) -> T {
        let until = Instant::now() + WAIT;
        loop {
            if let Some(v) = probe(self) {
                return v;
            }
            if Instant::now() > until {
                let body = self.exec("return document.body.innerText", json!([]));
                panic!(
                    "timed out waiting for {what}; the page says:\n{}",
                    body.as_str().unwrap_or("")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until `css` matches an element.
    pub fn wait_for_element(&self, css: &str) -> Element {
        self.wait_for(&format!("an element matching {css:?}"), |b| b.try_find(css))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.try_raw("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
