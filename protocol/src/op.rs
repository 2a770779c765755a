//! The op table: every operation and all its facts, stated in one place.
//!
//! Each row of `op_table!` below names one op and states every fact about it; the macro builds
//! the `Op` enum and `Op::facts` (an exhaustive `match`) from the rows. A row that leaves out a
//! fact does not match the macro and does not compile, and there is no other way to add an op:
//!
//! ```compile_fail
//! use smdb_protocol::op::*;
//! smdb_protocol::op_table! {
//!     /// A new op whose author forgot to say whether a follower may serve it.
//!     Frobnicate = "FROBNICATE" {
//!         need: Need::Scope(Scope::Write), before_hello: false,
//!         effect: Effect::Write, batch: false, route: Instance,
//!         resend: Resend::Never, http: &[],
//!     },
//! }
//! ```
//!
//! Each route's ops are also an enum of their own (`routes::Instance`, `routes::Control`,
//! ...; `Op::route` gives an op as one), and each dispatcher matches its route's enum with no
//! `_` arm. So an op whose row is complete but whose handler was not written does not compile
//! either, and the error points at the handler that lacks it:
//!
//! ```compile_fail
//! mod table {
//!     use smdb_protocol::op::*;
//!     smdb_protocol::op_table! {
//!         Get = "GET" {
//!             need: Need::Nothing, before_hello: false,
//!             effect: Effect::Read, batch: false, route: Instance,
//!             follower: Follower::Serve, resend: Resend::Safe, http: &[],
//!         },
//!         /// A new op: its row is complete, its handler below was not written.
//!         Frobnicate = "FROBNICATE" {
//!             need: Need::Nothing, before_hello: false,
//!             effect: Effect::Write, batch: false, route: Instance,
//!             follower: Follower::Refuse, resend: Resend::Never, http: &[],
//!         },
//!     }
//! }
//! // The instance route's dispatcher (the shard's `execute_op`, in the server).
//! fn handle(op: table::routes::Instance) -> &'static str {
//!     match op {
//!         table::routes::Instance::Get => "got",
//!     }
//! }
//! ```
//!
//! The same without the new row compiles (so the test above fails for that reason alone):
//!
//! ```
//! mod table {
//!     use smdb_protocol::op::*;
//!     smdb_protocol::op_table! {
//!         Get = "GET" {
//!             need: Need::Nothing, before_hello: false,
//!             effect: Effect::Read, batch: false, route: Instance,
//!             follower: Follower::Serve, resend: Resend::Safe, http: &[],
//!         },
//!     }
//! }
//! fn handle(op: table::routes::Instance) -> &'static str {
//!     match op {
//!         table::routes::Instance::Get => "got",
//!     }
//! }
//! assert_eq!(handle(table::routes::Instance::Get), "got");
//! assert_eq!(
//!     table::Op::Get.route(),
//!     table::Routed::Instance(table::routes::Instance::Get)
//! );
//! ```
//!
//! Every layer asks this table: authorization (`need`), the follower gate and the shard's own
//! check (`effect`, `follower`), BATCH (`batch`), the dispatchers (`route`, `Op::route`), the
//! release of a write's reply (`effect`: it waits for replicas, and a primary past its lease
//! holds it back), metrics (`Op::ALL`, `Op::COUNT`), the HTTP router (`http`) and the Rust
//! client's resending (`resend`).
//! The member's role is a run-time input (`Facts::refused_on`): failover changes it without a
//! restart.

/// One permission a token may carry (docs/protocol.md, "Auth").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    Read,
    Write,
    Admin,
    Replicate,
}

impl Scope {
    pub const ALL: [Scope; 4] = [Scope::Read, Scope::Write, Scope::Admin, Scope::Replicate];

    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
            Scope::Replicate => "replicate",
        }
    }

    pub fn parse(name: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// What a session needs to run an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Every session may run it (HELLO, PING, BYE, AUTH itself; the label-only pseudo-ops).
    Nothing,
    /// The session's token must carry this scope.
    Scope(Scope),
    /// An authenticated session, and the scope of each op inside (BATCH).
    EachOpsScope,
}

/// What running an op does to the member's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Answered by the session; touches no shard.
    Session,
    /// Reads state; never appends to a log.
    Read,
    /// Decided on the primary and appended to a shard's log (replicas receive the entry). Its
    /// reply is released once durable (and replicated, with sync replication); under failover
    /// a primary past its lease appends nothing and releases no such reply (`NO_PRIMARY`).
    Write,
    /// Acts on the member or the cluster (replication, roles), not on a shard's state.
    Control,
    /// BATCH: each op inside has its own effect.
    EachOp,
}

/// Where the server answers an op. Each route also names a sub-enum of the ops it answers,
/// made by `op_table!` in `routes` (`routes::Instance`, ...), and `Op::route` gives an op as
/// its route's sub-enum (`Routed`): each dispatcher matches its own sub-enum with no `_`, so
/// an op added to the table without a handler does not compile where the handler is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The connection's session, on the front.
    Session,
    /// The shard that owns the instance the params name (`instance_id`, else `id`).
    Instance,
    /// The shard that decides machine definitions (shard 0).
    Definitions,
    /// Every shard, results merged on the front.
    AllShards,
    /// The front's subscription table (and the shards it watches).
    Subscriptions,
    /// The control executor (replication, roles): one request, one reply.
    Control,
    /// A connection turned into a stream the control executor feeds (REPLICATE, BACKUP).
    Stream,
    /// BATCH: one shard for an atomic batch, each op's own otherwise.
    Batch,
    /// Cluster mode's ops (`CLUSTER_*`, docs/cluster.md), answered on the front.
    Cluster,
    /// A label only (metrics, logs): never a request.
    Label,
}

/// Whether a member that is not the primary serves an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follower {
    /// Served on any member.
    Serve,
    /// Refused with `READ_ONLY_MODE` (naming the primary) or `NO_PRIMARY`.
    Refuse,
    /// BATCH: refused if any op inside is refused.
    EachOp,
}

/// Whether a client may send an op again by itself, after a refusal the server marks retryable
/// or a lost connection, with no risk of acting twice or of answering otherwise than the first
/// time would have (clients/rust's `Retry`). A refusal the server surely did not act on
/// (`SHUTTING_DOWN`, `RATE_LIMITED`, `CONNECTION_LIMIT`, ...) lets any op go again whatever
/// this says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resend {
    /// A read, or a write whose repetition is harmless (the same PUT_MACHINE again answers
    /// `created: false`).
    Safe,
    /// Only with an idempotency key (the op's `idempotency_key`, HTTP's `Idempotency-Key`): the
    /// server answers a repeat with the first result.
    WithKey,
    /// Never: a repeat may act twice or answer otherwise (a second DELETE_INSTANCE finds no
    /// instance, a second TIMERS_RESUME says `was_paused: false`), or the op is no request a
    /// client resends (a stream, a label).
    Never,
    /// BATCH: safe when every op inside is.
    EachOp,
}

impl Resend {
    /// Whether a request may go again: `keyed` says it carries an idempotency key, `each_safe`
    /// that every op inside a BATCH may go again.
    pub const fn allows(self, keyed: bool, each_safe: bool) -> bool {
        match self {
            Resend::Safe => true,
            Resend::WithKey => keyed,
            Resend::Never => false,
            Resend::EachOp => each_safe,
        }
    }
}

mod http;
pub use http::{where_value, Body, Created, HttpReply, HttpRoute, Method, Query, QueryKind};

/// `http!(Get, "/path")`: one `HttpRoute` answering the op's result with a plain 200;
/// `http!(Post, "/path", body: Body::Members, etag: true)` names the facts that differ from
/// `HttpRoute::PLAIN` (a struct literal, so rows stay constants).
macro_rules! http {
    ($method:ident, $path:literal $(, $fact:ident: $value:expr)* $(,)?) => {
        HttpRoute {
            method: Method::$method,
            path: $path,
            $( $fact: $value, )*
            ..HttpRoute::PLAIN
        }
    };
}

/// The event stream's path, run by WATCH_INSTANCE and WATCH_ALL (`HttpReply::Stream`).
const STREAM: &[HttpRoute] = &[http!(
    Get,
    "/stream",
    reply: HttpReply::Stream,
    query: &[
        Query::list("machines"),
        Query::list("events"),
        Query::list("from_states"),
        Query::list("to_states"),
        Query::str("instance").member("instance_id"),
        Query::bool("include_context"),
    ],
)];

/// The role a member holds now, as the op table sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// No replication: accepts writes.
    Standalone,
    /// Accepts writes (and, with failover, holds a valid lease).
    Primary,
    /// Follows a primary (or waits for one): serves reads only.
    Follower,
}

/// Everything the server needs to know about an op, stated once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// The wire name (the `op` field; the `op` label of metrics and logs).
    pub name: &'static str,
    /// Allowed before HELLO (a load balancer may probe with one PING).
    pub before_hello: bool,
    pub need: Need,
    pub effect: Effect,
    /// May appear inside a BATCH.
    pub batch: bool,
    pub route: Route,
    pub follower: Follower,
    /// Whether a client may send it again by itself (clients/rust's `Retry`).
    pub resend: Resend,
    /// The HTTP paths that run it (empty: RCP1 only).
    pub http: &'static [HttpRoute],
}

impl Facts {
    /// Whether a member in `role` refuses this op (BATCH: see `Follower::EachOp`, checked per
    /// op by the caller).
    pub const fn refused_on(&self, role: Role) -> bool {
        matches!((self.follower, role), (Follower::Refuse, Role::Follower))
    }

    /// Appends to a log.
    pub const fn writes(&self) -> bool {
        matches!(self.effect, Effect::Write)
    }
}

/// Builds `Op`, its facts and its typed routes from the table's rows (see the module docs).
/// Exported only so the doc tests above can show that a row without every fact, or a handler
/// without an arm for an op of its route, does not compile.
///
/// The `@routes` rules sort the rows' variants into one bucket per route (a token muncher:
/// each step moves one row into its route's bucket), then `@enum` makes each bucket an enum
/// in `routes` with its conversions to `Op`. A row whose route is not one of the ten does
/// not match any rule.
#[doc(hidden)]
#[macro_export]
macro_rules! op_table {
    (@routes [$($se:ident)*] [$($in:ident)*] [$($de:ident)*] [$($al:ident)*] [$($su:ident)*]
        [$($co:ident)*] [$($st:ident)*] [$($ba:ident)*] [$($cl:ident)*] [$($la:ident)*] ;) => {
        /// Each route's ops (`Route`), one enum per route: what its dispatcher matches.
        pub mod routes {
            $crate::op_table!(@enum Session $($se)*);
            $crate::op_table!(@enum Instance $($in)*);
            $crate::op_table!(@enum Definitions $($de)*);
            $crate::op_table!(@enum AllShards $($al)*);
            $crate::op_table!(@enum Subscriptions $($su)*);
            $crate::op_table!(@enum Control $($co)*);
            $crate::op_table!(@enum Stream $($st)*);
            $crate::op_table!(@enum Batch $($ba)*);
            $crate::op_table!(@enum Cluster $($cl)*);
            $crate::op_table!(@enum Label $($la)*);
        }

        /// An op as its route's sub-enum (`Op::route`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Routed {
            Session(routes::Session),
            Instance(routes::Instance),
            Definitions(routes::Definitions),
            AllShards(routes::AllShards),
            Subscriptions(routes::Subscriptions),
            Control(routes::Control),
            Stream(routes::Stream),
            Batch(routes::Batch),
            Cluster(routes::Cluster),
            Label(routes::Label),
        }
    };
    (@routes [$($se:ident)*] $in:tt $de:tt $al:tt $su:tt $co:tt $st:tt $ba:tt $cl:tt $la:tt ;
        $v:ident Session, $($rest:tt)*) => {
        $crate::op_table!(@routes [$($se)* $v] $in $de $al $su $co $st $ba $cl $la ; $($rest)*);
    };
    (@routes $se:tt [$($in:ident)*] $de:tt $al:tt $su:tt $co:tt $st:tt $ba:tt $cl:tt $la:tt ;
        $v:ident Instance, $($rest:tt)*) => {
        $crate::op_table!(@routes $se [$($in)* $v] $de $al $su $co $st $ba $cl $la ; $($rest)*);
    };
    (@routes $se:tt $in:tt [$($de:ident)*] $al:tt $su:tt $co:tt $st:tt $ba:tt $cl:tt $la:tt ;
        $v:ident Definitions, $($rest:tt)*) => {
        $crate::op_table!(@routes $se $in [$($de)* $v] $al $su $co $st $ba $cl $la ; $($rest)*);
    };
    (@routes $se:tt $in:tt $de:tt [$($al:ident)*] $su:tt $co:tt $st:tt $ba:tt $cl:tt $la:tt ;
        $v:ident AllShards, $($rest:tt)*) => {
        $crate::op_table!(@routes $se $in $de [$($al)* $v] $su $co $st $ba $cl $la ; $($rest)*);
    };
    (@routes $se:tt $in:tt $de:tt $al:tt [$($su:ident)*] $co:tt $st:tt $ba:tt $cl:tt $la:tt ;
        $v:ident Subscriptions, $($rest:tt)*) => {
        $crate::op_table!(@routes $se $in $de $al [$($su)* $v] $co $st $ba $cl $la ; $($rest)*);
    };
    (@routes $se:tt $in:tt $de:tt $al:tt $su:tt [$($co:ident)*] $st:tt $ba:tt $cl:tt $la:tt ;
        $v:ident Control, $($rest:tt)*) => {
        $crate::op_table!(@routes $se $in $de $al $su [$($co)* $v] $st $ba $cl $la ; $($rest)*);
    };
    (@routes $se:tt $in:tt $de:tt $al:tt $su:tt $co:tt [$($st:ident)*] $ba:tt $cl:tt $la:tt ;
        $v:ident Stream, $($rest:tt)*) => {
        $crate::op_table!(@routes $se $in $de $al $su $co [$($st)* $v] $ba $cl $la ; $($rest)*);
    };
    (@routes $se:tt $in:tt $de:tt $al:tt $su:tt $co:tt $st:tt [$($ba:ident)*] $cl:tt $la:tt ;
        $v:ident Batch, $($rest:tt)*) => {
        $crate::op_table!(@routes $se $in $de $al $su $co $st [$($ba)* $v] $cl $la ; $($rest)*);
    };
    (@routes $se:tt $in:tt $de:tt $al:tt $su:tt $co:tt $st:tt $ba:tt [$($cl:ident)*] $la:tt ;
        $v:ident Cluster, $($rest:tt)*) => {
        $crate::op_table!(@routes $se $in $de $al $su $co $st $ba [$($cl)* $v] $la ; $($rest)*);
    };
    (@routes $se:tt $in:tt $de:tt $al:tt $su:tt $co:tt $st:tt $ba:tt $cl:tt [$($la:ident)*] ;
        $v:ident Label, $($rest:tt)*) => {
        $crate::op_table!(@routes $se $in $de $al $su $co $st $ba $cl [$($la)* $v] ; $($rest)*);
    };
    (@enum $route:ident $($v:ident)*) => {
        #[doc = concat!("The ops of `Route::", stringify!($route), "`.")]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $route {
            $( #[doc = concat!("`Op::", stringify!($v), "`")] $v, )*
        }

        impl $route {
            /// The op this is.
            pub const fn op(self) -> super::Op {
                match self {
                    $( $route::$v => super::Op::$v, )*
                }
            }
        }

        impl From<$route> for super::Op {
            fn from(r: $route) -> super::Op {
                r.op()
            }
        }
    };
    ($( $(#[$doc:meta])* $variant:ident = $name:literal {
        need: $need:expr, before_hello: $before_hello:expr,
        effect: $effect:expr, batch: $batch:expr, route: $route:ident,
        follower: $follower:expr, resend: $resend:expr,
        http: $http:expr $(,)?
    } ),* $(,)?) => {
        /// Every operation the server knows, plus the label-only pseudo-ops `Frame` (errors
        /// before a request could be read) and `Unknown` (an op name we do not serve, one label
        /// value so clients cannot inflate label cardinality).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Op {
            $( $(#[$doc])* $variant, )*
        }

        impl Op {
            /// All ops in declaration order (sizes per-op metric arrays).
            pub const ALL: &'static [Op] = &[$(Op::$variant),*];

            /// Everything about this op (each row a constant, so its facts may call `const fn`s).
            pub const fn facts(self) -> &'static Facts {
                match self {
                    $( Op::$variant => {
                        const FACTS: Facts = Facts {
                            name: $name,
                            before_hello: $before_hello,
                            need: $need,
                            effect: $effect,
                            batch: $batch,
                            route: Route::$route,
                            follower: $follower,
                            resend: $resend,
                            http: $http,
                        };
                        &FACTS
                    } )*
                }
            }

            /// This op as its route's sub-enum: what the route's dispatcher matches.
            pub const fn route(self) -> Routed {
                match self {
                    $( Op::$variant => Routed::$route(routes::$route::$variant), )*
                }
            }
        }

        $crate::op_table!(@routes [] [] [] [] [] [] [] [] [] [] ; $($variant $route,)*);
    };
}

op_table! {
    /// Opens a session: protocol version, server facts.
    Hello = "HELLO" {
        need: Need::Nothing, before_hello: true,
        effect: Effect::Session, batch: false, route: Session,
        follower: Follower::Serve, resend: Resend::Safe,
        http: &[],
    },
    Ping = "PING" {
        need: Need::Nothing, before_hello: true,
        effect: Effect::Session, batch: false, route: Session,
        follower: Follower::Serve, resend: Resend::Safe,
        http: &[],
    },
    /// Answered, then the server closes the connection.
    Bye = "BYE" {
        need: Need::Nothing, before_hello: true,
        effect: Effect::Session, batch: false, route: Session,
        follower: Follower::Serve, resend: Resend::Never,
        http: &[],
    },
    Info = "INFO" {
        need: Need::Scope(Scope::Read), before_hello: false,
        effect: Effect::Read, batch: false, route: AllShards,
        follower: Follower::Serve, resend: Resend::Safe,
        http: &[http!(Get, "/info", scopes: true)],
    },
    Auth = "AUTH" {
        need: Need::Nothing, before_hello: false,
        effect: Effect::Session, batch: false, route: Session,
        follower: Follower::Serve, resend: Resend::Safe,
        http: &[],
    },
    /// Decided on the definitions shard, installed on every shard.
    PutMachine = "PUT_MACHINE" {
        need: Need::Scope(Scope::Admin), before_hello: false,
        effect: Effect::Write, batch: false, route: AllShards,
        follower: Follower::Refuse, resend: Resend::Safe,
        http: &[http!(
            Put,
            "/machines/{machine}/versions/{version}",
            body: Body::Member("definition"),
            created: Created::IfTrue("created"),
        )],
    },
    GetMachine = "GET_MACHINE" {
        need: Need::Scope(Scope::Read), before_hello: false,
        effect: Effect::Read, batch: false, route: Definitions,
        follower: Follower::Serve, resend: Resend::Safe,
        http: &[
            http!(Get, "/machines/{machine}"),
            http!(Get, "/machines/{machine}/versions/{version}"),
            http!(
                Get,
                "/machines/{machine}/versions/{version}/diagram",
                reply: HttpReply::Diagram,
            ),
        ],
    },
    ListMachines = "LIST_MACHINES" {
        need: Need::Scope(Scope::Read), before_hello: false,
        effect: Effect::Read, batch: false, route: Definitions,
        follower: Follower::Serve, resend: Resend::Safe,
        http: &[http!(Get, "/machines")],
    },
    /// Live instance counts per state of one machine (all versions), from every shard's
    /// counters: no instance is visited.
    MachineStats = "MACHINE_STATS" {
        need: Need::Scope(Scope::Read), before_hello: false,
        effect: Effect::Read, batch: false, route: AllShards,
        follower: Follower::Serve, resend: Resend::Safe,
        http: &[http!(Get, "/machines/{machine}/stats")],
    },
    CreateInstance = "CREATE_INSTANCE" {
        need: Need::Scope(Scope::Write), before_hello: false,
        effect: Effect::Write, batch: true, route: Instance,
        follower: Follower::Refuse, resend: Resend::WithKey,
        http: &[http!(
            Post,
            "/instances",
            body: Body::Members,
            etag: true,
            created: Created::UnlessFalse("applied"),
            location: Some("/instances/{id}"),
        )],
    },
    GetInstance = "GET_INSTANCE" {
        need: Need::Scope(Scope::Read), before_hello: false,
        effect: Effect::Read, batch: true, route: Instance,
        follower: Follower::Serve, resend: Resend::Safe,
        http: &[http!(Get, "/instances/{id}", etag: true)],
    },
    ListInstances = "LIST_INSTANCES" {
        need: Need::Scope(Scope::Read), before_hello: false,
        effect: Effect::Read, batch: false, route: AllShards,
        follower: Follower::Serve, resend: Resend::Safe,
        http: &[http!(
            Get,
            "/instances",
            query: &[
                Query::str("machine"),
                Query::str("state"),
                Query::u64("limit"),
                Query::str("cursor"),
            ],
        )],
    },
    /// Instances by their declared indexes (docs/queries.md), merged by id across shards.
    FindInstances = "FIND_INSTANCES" {
        need: Need::Scope(Scope::Read), before_hello: false,
        effect: Effect::Read, batch: false, route: AllShards,
        follower: Follower::Serve, resend: Resend::Safe,
        http: &[],
    },
    /// Instances by any context path, a bounded walk per call (docs/queries.md).
    ScanInstances = "SCAN_INSTANCES" {
        need: Need::Scope(Scope::Read), before_hello: false,
        effect: Effect::Read, batch: false, route: AllShards,
        follower: Follower::Serve, resend: Resend::Safe,
        http: &[],
    },
    /// Moves instances of one version to another, a bounded walk per call, resumable by
    /// cursor (docs/lifecycle.md).
    MigrateInstances = "MIGRATE_INSTANCES" {
        need: Need::Scope(Scope::Admin), before_hello: false,
        effect: Effect::Write, batch: false, route: AllShards,
        follower: Follower::Refuse, resend: Resend::Safe,
        http: &[http!(Post, "/machines/{machine}/migrate", body: Body::Members)],
    },
    /// Deletes a machine's matching instances, a bounded walk per call, resumable by cursor
    /// (docs/lifecycle.md).
    DeleteInstances = "DELETE_INSTANCES" {
        need: Need::Scope(Scope::Admin), before_hello: false,
        effect: Effect::Write, batch: false, route: AllShards,
        follower: Follower::Refuse, resend: Resend::Safe,
        http: &[http!(Post, "/machines/{machine}/delete-instances", body: Body::Members)],
    },
    DeleteInstance = "DELETE_INSTANCE" {
        need: Need::Scope(Scope::Write), before_hello: false,
        effect: Effect::Write, batch: true, route: Instance,
        follower: Follower::Refuse, resend: Resend::Never,
        http: &[http!(Delete, "/instances/{id}")],
    },
    ApplyEvent = "APPLY_EVENT" {
        need: Need::Scope(Scope::Write), before_hello: false,
        effect: Effect::Write, batch: true, route: Instance,
        follower: Follower::Refuse, resend: Resend::WithKey,
        http: &[http!(
            Post,
            "/instances/{id}/events",
            rename: &[("id", "instance_id")],
            body: Body::Members,
            etag: true,
            if_match: true,
        )],
    },
    GetHistory = "GET_HISTORY" {
        need: Need::Scope(Scope::Read), before_hello: false,
        effect: Effect::Read, batch: false, route: Instance,
        follower: Follower::Serve, resend: Resend::Safe,
        http: &[http!(
            Get,
            "/instances/{id}/events",
            query: &[Query::u64("from"), Query::u64("limit")],
        )],
    },
    /// Pushes one instance's events (HTTP: `GET /stream?instance=ID`).
    WatchInstance = "WATCH_INSTANCE" {
        need: Need::Scope(Scope::Read), before_hello: false,
        effect: Effect::Read, batch: false, route: Subscriptions,
        follower: Follower::Serve, resend: Resend::Safe,
        http: STREAM,
    },
    /// Pushes every matching event of every shard (HTTP: `GET /stream`).
    WatchAll = "WATCH_ALL" {
        need: Need::Scope(Scope::Read), before_hello: false,
        effect: Effect::Read, batch: false, route: Subscriptions,
        follower: Follower::Serve, resend: Resend::Safe,
        http: STREAM,
    },
    Unwatch = "UNWATCH" {
        need: Need::Scope(Scope::Read), before_hello: false,
        effect: Effect::Read, batch: false, route: Subscriptions,
        follower: Follower::Serve, resend: Resend::Never,
        http: &[],
    },
    Batch = "BATCH" {
        need: Need::EachOpsScope, before_hello: false,
        effect: Effect::EachOp, batch: false, route: Batch,
        follower: Follower::EachOp, resend: Resend::EachOp,
        http: &[http!(Post, "/batch", body: Body::Members)],
    },
    /// Turns the connection into a replication stream (only a primary serves one).
    Replicate = "REPLICATE" {
        need: Need::Scope(Scope::Replicate), before_hello: false,
        effect: Effect::Control, batch: false, route: Stream,
        follower: Follower::Refuse, resend: Resend::Never,
        http: &[],
    },
    /// Turns the connection into a backup stream: one cut for all shards, then per shard a
    /// snapshot and the log up to the cut, then the end (docs/backup.md).
    Backup = "BACKUP" {
        need: Need::Scope(Scope::Replicate), before_hello: false,
        effect: Effect::Control, batch: false, route: Stream,
        follower: Follower::Refuse, resend: Resend::Never,
        http: &[],
    },
    ReplicationStatus = "REPLICATION_STATUS" {
        need: Need::Scope(Scope::Read), before_hello: false,
        effect: Effect::Read, batch: false, route: Control,
        follower: Follower::Serve, resend: Resend::Safe,
        http: &[http!(Get, "/replication")],
    },
    /// Makes a replica the primary (a follower's op by nature).
    Promote = "PROMOTE" {
        need: Need::Scope(Scope::Admin), before_hello: false,
        effect: Effect::Control, batch: false, route: Control,
        follower: Follower::Serve, resend: Resend::Never,
        http: &[],
    },
    /// Stops automatic failover cluster-wide (failover on; docs/ha.md, "Maintenance").
    HaPause = "HA_PAUSE" {
        need: Need::Scope(Scope::Admin), before_hello: false,
        effect: Effect::Control, batch: false, route: Control,
        follower: Follower::Serve, resend: Resend::Never,
        http: &[],
    },
    /// Restarts automatic failover after `HA_PAUSE`.
    HaResume = "HA_RESUME" {
        need: Need::Scope(Scope::Admin), before_hello: false,
        effect: Effect::Control, batch: false, route: Control,
        follower: Follower::Serve, resend: Resend::Never,
        http: &[],
    },
    /// Planned handover of the primary role (failover on; docs/ha.md, "Switchover").
    Switchover = "SWITCHOVER" {
        need: Need::Scope(Scope::Admin), before_hello: false,
        effect: Effect::Control, batch: false, route: Control,
        follower: Follower::Refuse, resend: Resend::Never,
        http: &[http!(Post, "/switchover", body: Body::OptionalMembers)],
    },
    /// Lets the timers of a data dir marked `timers.paused` (`smdb-server restore
    /// --pause-timers`) fire: deletes the marker, then every shard fires what is overdue.
    TimersResume = "TIMERS_RESUME" {
        need: Need::Scope(Scope::Admin), before_hello: false,
        effect: Effect::Control, batch: false, route: AllShards,
        follower: Follower::Serve, resend: Resend::Never,
        http: &[http!(Post, "/timers/resume")],
    },
    /// The hash slot of an id (docs/cluster.md, "Slots"): a pure function, answered by every
    /// server, standalone included.
    ClusterKeyslot = "CLUSTER_KEYSLOT" {
        need: Need::Scope(Scope::Read), before_hello: false,
        effect: Effect::Read, batch: false, route: Cluster,
        follower: Follower::Serve, resend: Resend::Safe,
        http: &[http!(Get, "/cluster/keyslot/{id}")],
    },
    /// The cluster's groups, their slots, members and moves (docs/cluster.md, "Ops").
    ClusterShards = "CLUSTER_SHARDS" {
        need: Need::Scope(Scope::Read), before_hello: false,
        effect: Effect::Read, batch: false, route: Cluster,
        follower: Follower::Serve, resend: Resend::Safe,
        http: &[http!(Get, "/cluster/shards")],
    },
    /// The slot ranges with their primary's and replicas' addresses.
    ClusterSlots = "CLUSTER_SLOTS" {
        need: Need::Scope(Scope::Read), before_hello: false,
        effect: Effect::Read, batch: false, route: Cluster,
        follower: Follower::Serve, resend: Resend::Safe,
        http: &[http!(Get, "/cluster/slots")],
    },
    /// The cluster's state as this member sees it.
    ClusterInfo = "CLUSTER_INFO" {
        need: Need::Scope(Scope::Read), before_hello: false,
        effect: Effect::Read, batch: false, route: Cluster,
        follower: Follower::Serve, resend: Resend::Safe,
        http: &[http!(Get, "/cluster/info")],
    },
    /// Creates the slot map, only if absent (a second one is refused).
    ClusterCreate = "CLUSTER_CREATE" {
        need: Need::Scope(Scope::Admin), before_hello: false,
        effect: Effect::Control, batch: false, route: Cluster,
        follower: Follower::Serve, resend: Resend::Never,
        http: &[],
    },
    /// Adds a group to the map, with no slots (a repeat answers `added: false`).
    ClusterAddGroup = "CLUSTER_ADD_GROUP" {
        need: Need::Scope(Scope::Admin), before_hello: false,
        effect: Effect::Control, batch: false, route: Cluster,
        follower: Follower::Serve, resend: Resend::Never,
        http: &[],
    },
    /// Moves one slot range to another group.
    ClusterMoveSlots = "CLUSTER_MOVE_SLOTS" {
        need: Need::Scope(Scope::Admin), before_hello: false,
        effect: Effect::Control, batch: false, route: Cluster,
        follower: Follower::Serve, resend: Resend::Never,
        http: &[],
    },
    /// Aborts a running move.
    ClusterCancelMove = "CLUSTER_CANCEL_MOVE" {
        need: Need::Scope(Scope::Admin), before_hello: false,
        effect: Effect::Control, batch: false, route: Cluster,
        follower: Follower::Serve, resend: Resend::Never,
        http: &[],
    },
    /// A move's stream from the source group's primary to the target's (docs/cluster.md,
    /// "Moving slots"): members call each other with `replication.auth_token`.
    ClusterImport = "CLUSTER_IMPORT" {
        need: Need::Scope(Scope::Replicate), before_hello: false,
        effect: Effect::Control, batch: false, route: Cluster,
        follower: Follower::Refuse, resend: Resend::Never,
        http: &[],
    },
    /// Label: an error before a request could be read.
    Frame = "FRAME" {
        need: Need::Nothing, before_hello: false,
        effect: Effect::Session, batch: false, route: Label,
        follower: Follower::Serve, resend: Resend::Never,
        http: &[],
    },
    /// Label: an op name this server does not serve.
    Unknown = "UNKNOWN" {
        need: Need::Nothing, before_hello: false,
        effect: Effect::Session, batch: false, route: Label,
        follower: Follower::Serve, resend: Resend::Never,
        http: &[],
    },
}

impl Op {
    /// Number of ops (metric array sizes).
    pub const COUNT: usize = Op::ALL.len();

    pub const fn as_str(self) -> &'static str {
        self.facts().name
    }

    /// The op a request names, or `None` for a name we do not serve. The labels `FRAME` and
    /// `UNKNOWN` never parse from a request.
    pub fn parse(name: &str) -> Option<Op> {
        Op::ALL
            .iter()
            .copied()
            .find(|op| op.facts().route != Route::Label && op.as_str() == name)
    }

    pub const fn index(self) -> usize {
        self as usize
    }

    /// Allowed before HELLO.
    pub const fn allowed_before_hello(self) -> bool {
        self.facts().before_hello
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_index_matches() {
        for (i, op) in Op::ALL.iter().enumerate() {
            assert_eq!(op.index(), i);
            if op.facts().route != Route::Label {
                assert_eq!(Op::parse(op.as_str()), Some(*op));
            }
        }
        assert_eq!(Op::parse("FRAME"), None);
        assert_eq!(Op::parse("UNKNOWN"), None);
        assert_eq!(Op::parse("ping"), None);
    }

    /// Every op's row, checked fact by fact against what docs/protocol.md says of it. A new op
    /// fails here until its line is added, so its facts are read twice.
    #[test]
    fn every_op_has_the_facts_the_docs_give_it() {
        type Row = (Op, Option<Scope>, Effect, bool, Route, Follower, bool);
        let (read, write, admin) = (Some(Scope::Read), Some(Scope::Write), Some(Scope::Admin));
        let (serve, refuse) = (Follower::Serve, Follower::Refuse);
        #[rustfmt::skip]
        let want: &[Row] = &[
            (Op::Hello, None, Effect::Session, false, Route::Session, serve, true),
            (Op::Ping, None, Effect::Session, false, Route::Session, serve, true),
            (Op::Bye, None, Effect::Session, false, Route::Session, serve, true),
            (Op::Info, read, Effect::Read, false, Route::AllShards, serve, false),
            (Op::Auth, None, Effect::Session, false, Route::Session, serve, false),
            (Op::PutMachine, admin, Effect::Write, false, Route::AllShards, refuse, false),
            (Op::GetMachine, read, Effect::Read, false, Route::Definitions, serve, false),
            (Op::ListMachines, read, Effect::Read, false, Route::Definitions, serve, false),
            (Op::MachineStats, read, Effect::Read, false, Route::AllShards, serve, false),
            (Op::CreateInstance, write, Effect::Write, true, Route::Instance, refuse, false),
            (Op::GetInstance, read, Effect::Read, true, Route::Instance, serve, false),
            (Op::ListInstances, read, Effect::Read, false, Route::AllShards, serve, false),
            (Op::FindInstances, read, Effect::Read, false, Route::AllShards, serve, false),
            (Op::ScanInstances, read, Effect::Read, false, Route::AllShards, serve, false),
            (Op::MigrateInstances, admin, Effect::Write, false, Route::AllShards, refuse, false),
            (Op::DeleteInstances, admin, Effect::Write, false, Route::AllShards, refuse, false),
            (Op::DeleteInstance, write, Effect::Write, true, Route::Instance, refuse, false),
            (Op::ApplyEvent, write, Effect::Write, true, Route::Instance, refuse, false),
            (Op::GetHistory, read, Effect::Read, false, Route::Instance, serve, false),
            (Op::WatchInstance, read, Effect::Read, false, Route::Subscriptions, serve, false),
            (Op::WatchAll, read, Effect::Read, false, Route::Subscriptions, serve, false),
            (Op::Unwatch, read, Effect::Read, false, Route::Subscriptions, serve, false),
            (Op::Batch, None, Effect::EachOp, false, Route::Batch, Follower::EachOp, false),
            (Op::Replicate, Some(Scope::Replicate), Effect::Control, false, Route::Stream,
                refuse, false),
            (Op::Backup, Some(Scope::Replicate), Effect::Control, false, Route::Stream,
                refuse, false),
            (Op::ReplicationStatus, read, Effect::Read, false, Route::Control, serve, false),
            (Op::Promote, admin, Effect::Control, false, Route::Control, serve, false),
            (Op::HaPause, admin, Effect::Control, false, Route::Control, serve, false),
            (Op::HaResume, admin, Effect::Control, false, Route::Control, serve, false),
            (Op::Switchover, admin, Effect::Control, false, Route::Control, refuse, false),
            (Op::TimersResume, admin, Effect::Control, false, Route::AllShards, serve, false),
            (Op::ClusterKeyslot, read, Effect::Read, false, Route::Cluster, serve, false),
            (Op::ClusterShards, read, Effect::Read, false, Route::Cluster, serve, false),
            (Op::ClusterSlots, read, Effect::Read, false, Route::Cluster, serve, false),
            (Op::ClusterInfo, read, Effect::Read, false, Route::Cluster, serve, false),
            (Op::ClusterCreate, admin, Effect::Control, false, Route::Cluster, serve, false),
            (Op::ClusterAddGroup, admin, Effect::Control, false, Route::Cluster, serve, false),
            (Op::ClusterMoveSlots, admin, Effect::Control, false, Route::Cluster, serve, false),
            (Op::ClusterCancelMove, admin, Effect::Control, false, Route::Cluster, serve, false),
            (Op::ClusterImport, Some(Scope::Replicate), Effect::Control, false, Route::Cluster,
                refuse, false),
            (Op::Frame, None, Effect::Session, false, Route::Label, serve, false),
            (Op::Unknown, None, Effect::Session, false, Route::Label, serve, false),
        ];
        assert_eq!(want.len(), Op::COUNT, "every op has a line above");
        for &(op, scope, effect, batch, route, follower, before_hello) in want {
            let f = op.facts();
            let need = match (op, scope) {
                (Op::Batch, _) => Need::EachOpsScope,
                (_, Some(s)) => Need::Scope(s),
                (_, None) => Need::Nothing,
            };
            assert_eq!(f.need, need, "{op:?} need");
            assert_eq!(f.effect, effect, "{op:?} effect");
            assert_eq!(f.batch, batch, "{op:?} batch");
            assert_eq!(f.route, route, "{op:?} route");
            assert_eq!(f.follower, follower, "{op:?} follower");
            assert_eq!(f.before_hello, before_hello, "{op:?} before HELLO");
            // A write is never served by a follower.
            if f.writes() {
                assert!(f.refused_on(Role::Follower), "{op:?}");
            }
            assert!(!f.refused_on(Role::Primary) && !f.refused_on(Role::Standalone));
        }
    }

    /// `Op::route` agrees with the `route` fact and gives the op back; a batchable op is an
    /// instance op (BATCH items are held as `routes::Instance`); a stream path's op subscribes.
    #[test]
    fn every_op_routes_to_its_routes_enum_and_back() {
        for &op in Op::ALL {
            let (route, back) = match op.route() {
                Routed::Session(r) => (Route::Session, r.op()),
                Routed::Instance(r) => (Route::Instance, r.op()),
                Routed::Definitions(r) => (Route::Definitions, r.op()),
                Routed::AllShards(r) => (Route::AllShards, r.op()),
                Routed::Subscriptions(r) => (Route::Subscriptions, r.op()),
                Routed::Control(r) => (Route::Control, r.op()),
                Routed::Stream(r) => (Route::Stream, r.op()),
                Routed::Batch(r) => (Route::Batch, r.op()),
                Routed::Cluster(r) => (Route::Cluster, r.op()),
                Routed::Label(r) => (Route::Label, r.op()),
            };
            assert_eq!((route, back), (op.facts().route, op), "{op:?}");
            if op.facts().batch {
                assert_eq!(route, Route::Instance, "{op:?} is batchable");
            }
            // The HTTP stream path runs a subscription op (`http::reply` relies on it).
            for r in op
                .facts()
                .http
                .iter()
                .filter(|r| r.reply == HttpReply::Stream)
            {
                assert_eq!(route, Route::Subscriptions, "{op:?} {}", r.path);
            }
        }
    }

    /// The ops a client may not resend freely, named once more; every other op is `Safe`.
    #[test]
    fn every_op_has_its_resend_class() {
        let keyed = [Op::CreateInstance, Op::ApplyEvent];
        #[rustfmt::skip]
        let never = [
            Op::Bye, Op::DeleteInstance, Op::Unwatch, Op::Replicate, Op::Backup, Op::Promote,
            Op::HaPause, Op::HaResume, Op::Switchover, Op::TimersResume, Op::Frame, Op::Unknown,
            Op::ClusterCreate, Op::ClusterAddGroup, Op::ClusterMoveSlots, Op::ClusterCancelMove,
            Op::ClusterImport,
        ];
        for &op in Op::ALL {
            let want = match op {
                Op::Batch => Resend::EachOp,
                _ if keyed.contains(&op) => Resend::WithKey,
                _ if never.contains(&op) => Resend::Never,
                _ => Resend::Safe,
            };
            assert_eq!(op.facts().resend, want, "{op:?}");
        }
        assert!(Resend::WithKey.allows(true, false) && !Resend::WithKey.allows(false, true));
        assert!(Resend::EachOp.allows(false, true) && !Resend::EachOp.allows(true, false));
    }

    /// docs/protocol.md's scope table names, for each scope, exactly the ops that need it
    /// (BATCH, which needs each op's own, may be named in passing).
    #[test]
    fn the_docs_scope_table_agrees_with_the_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md");
        let doc = std::fs::read_to_string(path).expect("docs/protocol.md");
        for scope in Scope::ALL {
            let head = format!("| `{}` |", scope.as_str());
            let row = doc.lines().find(|l| l.starts_with(&head));
            let row = row.unwrap_or_else(|| panic!("no row for scope {scope:?}"));
            let words = row.split(|c: char| !(c.is_ascii_uppercase() || c == '_'));
            let mut listed: Vec<Op> = words.filter_map(Op::parse).collect();
            listed.retain(|op| op.facts().need != Need::EachOpsScope);
            listed.sort();
            let want: Vec<Op> = (Op::ALL.iter().copied())
                .filter(|op| op.facts().need == Need::Scope(scope))
                .collect();
            assert_eq!(listed, want, "docs/protocol.md's {scope:?} row");
        }
    }

    /// Each path's HTTP facts hold together, and the ones the HTTP layer leans on hold.
    #[test]
    fn every_http_route_states_facts_that_fit() {
        for op in Op::ALL {
            for r in op.facts().http {
                let params: Vec<&str> = (r.path.split('/'))
                    .filter_map(|p| p.strip_prefix('{')?.strip_suffix('}'))
                    .collect();
                for (param, _) in r.rename {
                    assert!(params.contains(param), "{op:?} renames {param}");
                }
                for q in r.query {
                    // Read by the HTTP layer itself (diagram format, stream start).
                    assert!(!["format", "from_cursor"].contains(&q.name), "{op:?}");
                }
                assert!(!r.if_match || r.etag, "{op:?}: If-Match without an ETag");
                let created = r.created != Created::Never;
                assert!(
                    r.location.is_none() || created,
                    "{op:?}: Location without 201"
                );
                if op.facts().resend == Resend::WithKey {
                    assert_ne!(r.body, Body::No, "{op:?}: a keyed write takes a body");
                }
                if r.reply == HttpReply::Stream {
                    assert_eq!(op.facts().http, STREAM, "{op:?}");
                }
            }
        }
    }

    #[test]
    fn every_http_path_is_unique_per_method_but_the_stream() {
        let mut seen = std::collections::BTreeMap::new();
        for op in Op::ALL {
            for r in op.facts().http {
                assert!(r.path.starts_with('/'), "{op:?}");
                if let Some(other) = seen.insert((r.method.as_str(), r.path), *op) {
                    let stream = [Op::WatchAll, Op::WatchInstance];
                    assert!(stream.contains(&other) && stream.contains(op), "{op:?}");
                }
            }
        }
    }
}
