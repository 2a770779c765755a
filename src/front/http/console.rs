//! The web console's files, compiled into the binary (`src/front/http/console/`), and the headers
//! they are served with (docs/http.md, "Console"). The page is plain HTML, CSS and three scripts
//! (`app.js`, loaded last, and the migration view in `migrate.js` and the cluster view in
//! `cluster.js`): it loads nothing from any other origin and runs under a CSP that allows only
//! this server's own files (no inline script or style).

/// One console file.
#[derive(Debug, PartialEq, Eq)]
pub struct Asset {
    pub name: &'static str,
    pub content_type: &'static str,
    pub body: &'static str,
}

/// Every console file; `GET /` serves `index.html`, `GET /assets/<name>` the others.
pub const ASSETS: &[Asset] = &[
    Asset {
        name: "index.html",
        content_type: "text/html; charset=utf-8",
        body: include_str!("console/index.html"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("console/app.js"),
    },
    Asset {
        name: "migrate.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("console/migrate.js"),
    },
    Asset {
        name: "cluster.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("console/cluster.js"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("console/app.css"),
    },
];

/// The Content-Security-Policy of console responses: this origin's files only, no inline
/// script or style, no framing, no `<base>`, forms only to this origin.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
    form-action 'self'";

/// The file named `name`.
pub fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}
