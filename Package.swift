// swift-tools-version:6.1
import PackageDescription

// One declaration per target, each listing every module its sources import (no more, no less), in layer
// order: arrows point down only. `docs/ARCHITECTURE.md` has the layer table; `scripts/check-architecture.sh`
// (in `make lint`) checks this file against it and against the sources' imports.

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "settee",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "settee-server", targets: ["settee-server"]),
        .executable(name: "settee-router", targets: ["settee-router"]),
        .executable(name: "settee", targets: ["settee"]),
        .executable(name: "settee-gateway", targets: ["settee-gateway"]),
        .executable(name: "settee-lite", targets: ["settee-lite"]),
        .executable(name: "settee-torture", targets: ["settee-torture"]),
        .library(name: "SetteeCore", targets: ["SetteeCore"]),
        .library(name: "SetteeProtocol", targets: ["SetteeProtocol"]),
        .library(name: "SetteeStorage", targets: ["SetteeStorage"]),
        .library(name: "SetteeClusterMap", targets: ["SetteeClusterMap"]),
        // The one JSON value; the benchmark package parses replies with it.
        .library(name: "SetteeJSON", targets: ["SetteeJSON"]),
        .library(name: "SetteeClient", targets: ["SetteeClient"]),
        .library(name: "SetteeReplication", targets: ["SetteeReplication"]),
        .library(name: "SetteeLite", targets: ["SetteeLite"]),
        // For the benchmark package's Lite-vs-raw-SQLite comparison (the same wrapper Lite runs on).
        .library(name: "SetteeSQLite", targets: ["SetteeSQLite"]),
        // For the benchmark package's micro-benchmark of a JavaScript map call.
        .library(name: "SetteeJS", targets: ["SetteeJS"]),
        // For the benchmark package's view index build (`settee-bench views`).
        .library(name: "SetteeViews", targets: ["SetteeViews"]),
        // For the benchmark package's micro-benchmark of the gateway's write path (`GatewayDatabase.put`).
        .library(name: "SetteeGateway", targets: ["SetteeGateway"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        // Admin API and views port, gateway REST, Lite's P2P listener.
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        // The gateway's websocket `_changes`.
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        // Request and response types the Hummingbird shells name directly.
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        // Credential hashing (HMAC/SHA-2 for PBKDF2 and SCRAM), rev ids; never hand-rolled crypto.
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        // Admin console: `/metrics` in Prometheus text format.
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        // Lite's P2P listener: a self-signed TLS identity made at start.
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        // Gzip bodies in the replication protocol and the gateway.
        .package(url: "https://github.com/adam-fowler/compress-nio.git", from: "1.5.0"),
    ],
    targets: [
        // C shims: the only places that see C headers.
        .systemLibrary(name: "CLZ4", pkgConfig: "liblz4", providers: [.apt(["liblz4-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(
            name: "CJavaScriptCore", pkgConfig: "javascriptcoregtk-4.1",
            providers: [.apt(["libjavascriptcoregtk-4.1-dev"])]),
        // bcrypt for the sync gateway's user passwords (libxcrypt).
        .systemLibrary(name: "CCrypt", pkgConfig: "libxcrypt", providers: [.apt(["libcrypt-dev"])]),
        // glibc's <malloc.h> (part of libc6-dev, like every header the build uses).
        .systemLibrary(name: "CMalloc"),
        // The compiler's cache prefetch hint (a header of its own; nothing to link).
        .systemLibrary(name: "CPrefetch"),
        // QR codes of Lite's P2P sync URLs (libqrencode).
        .systemLibrary(name: "CQREncode", pkgConfig: "libqrencode", providers: [.apt(["libqrencode-dev"])]),
        // Raw deflate with sync flush for BLIP 3 frames (zlib; ADR 0123).
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),

        // Pure values: no I/O, no threads of their own.
        // Ids, vBucket hash, HLC, limits, clocks, bucket settings.
        .target(
            name: "SetteeCore",
            dependencies: [
                // Only the API: `LineSafeLogHandler` wraps whatever handler a process bootstraps.
                .product(name: "Logging", package: "swift-log")
            ],
            swiftSettings: swiftSettings
        ),
        // The memcached-binary codec.
        .target(
            name: "SetteeProtocol",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio")
            ],
            swiftSettings: swiftSettings
        ),
        // Node info, vBucket map, placements, config stamps, cluster-config and bucket JSON.
        .target(
            name: "SetteeClusterMap",
            dependencies: [
                "SetteeCore", "SetteeJSON",
            ],
            swiftSettings: swiftSettings
        ),
        // The place that decides (pure values, time injected): ClusterBrain and its epoch rules, claims, failure
        // detector, heartbeat schedule, failover, rebalance planner and run (issue 69 item 1).
        .target(
            name: "SetteeControl",
            dependencies: [
                "SetteeClusterMap", "SetteeCore",
            ],
            swiftSettings: swiftSettings
        ),
        // Change-stream (DCP) state machines: failover log, stream-request decision, consumer, cursor.
        .target(
            name: "SetteeStreams",
            dependencies: [
                "SetteeCore"
            ],
            swiftSettings: swiftSettings
        ),
        // SCRAM state machines and RBAC roles.
        .target(
            name: "SetteeAuth",
            dependencies: [
                "SetteeCore",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The one parsed JSON value type (views, gateway, Lite).
        .target(
            name: "SetteeJSON",
            dependencies: [
                "SetteeCore"
            ],
            swiftSettings: swiftSettings
        ),
        // The BLIP messaging protocol (Couchbase Lite 2+'s replication transport): frames, varints, properties,
        // the deflate context with its checksum, ACK flow control; pure values over bytes.
        .target(
            name: "SetteeBLIP",
            dependencies: [
                "CZlib", "SetteeCore",
            ],
            swiftSettings: swiftSettings
        ),
        // Sub-document paths and the JSON byte editor the KV port's subdoc commands run (pure).
        .target(
            name: "SetteeSubdoc",
            dependencies: [
                "SetteeCore", "SetteeJSON",
            ],
            swiftSettings: swiftSettings
        ),
        // Revision trees, rev ids, attachments and document bodies shared by the gateway and Lite.
        .target(
            name: "SetteeDocument",
            dependencies: [
                "SetteeCore", "SetteeJSON",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The fault harness's pure part: histories, checkers (lost writes, counters, linearizability, split
        // brain), seeded fault schedules and the report. `settee-torture` drives real clusters with it.
        .target(
            name: "SetteeTorture",
            dependencies: [
                "SetteeCore"
            ],
            swiftSettings: swiftSettings
        ),

        // Engines: disk and threads, no network.
        // The only caller of sqlite3_*.
        .target(
            name: "SetteeSQLite",
            dependencies: [
                "CSQLite"
            ],
            swiftSettings: swiftSettings
        ),
        // BucketEngine: one bucket on one node (vBuckets, flusher, warmup, pagers).
        .target(
            name: "SetteeStorage",
            dependencies: [
                "CLZ4", "CMalloc", "CPrefetch", "SetteeCore", "SetteeSQLite", "SetteeStreams",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // The JavaScriptCore wrapper (view map/reduce, the sync function).
        .target(
            name: "SetteeJS",
            dependencies: [
                "CJavaScriptCore", "SetteeCore",
            ],
            swiftSettings: swiftSettings
        ),
        // Sync function, principals and access rules.
        .target(
            name: "SetteeSync",
            dependencies: [
                "CCrypt", "SetteeCore", "SetteeJS", "SetteeJSON",
            ],
            swiftSettings: swiftSettings
        ),
        // Lite, the embedded database: SQLite, views, live queries, FTS5, object mapping.
        .target(
            name: "SetteeLite",
            dependencies: [
                "SetteeCore", "SetteeDocument", "SetteeJSON", "SetteeReplication", "SetteeSQLite",
            ],
            swiftSettings: swiftSettings
        ),

        // Node control plane: the node's metadata (users, RBAC storage, credentials, the cluster document)
        // and bucket lifecycle over the engine.
        .target(
            name: "SetteeRegistry",
            dependencies: [
                "SetteeAuth", "SetteeClusterMap", "SetteeControl", "SetteeCore", "SetteeDiagnostics", "SetteeJSON",
                "SetteeStorage",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The audit log (its events, settings, writer thread and files) and what a logs collection uses (the recent
        // log lines, user-data hashing, tar.gz archives): ADR 0148.
        .target(
            name: "SetteeDiagnostics",
            dependencies: [
                "CZlib", "SetteeCore", "SetteeJSON",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // Design documents, view indexes and queries over one bucket's change feed (an engine: the node's set of
        // them, NodeViews, is in SetteeViewsServer).
        .target(
            name: "SetteeViews",
            dependencies: [
                "SetteeClusterMap", "SetteeCore", "SetteeJS", "SetteeJSON", "SetteeSQLite", "SetteeStorage",
                "SetteeStreams", .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),

        // TLS identities (operator PEM files, a node's kept self-signed certificate) and client trust (a CA file
        // or a pinned fingerprint), shared by the node, gateway, clients and Lite's listener.
        .target(
            name: "SetteeTLS",
            dependencies: [
                "SetteeCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
            ],
            swiftSettings: swiftSettings
        ),

        // Shells: network I/O.
        // The KV server (SwiftNIO).
        .target(
            name: "SetteeNode",
            dependencies: [
                "SetteeAuth", "SetteeClusterMap", "SetteeCore", "SetteeDiagnostics", "SetteeJSON", "SetteeProtocol",
                "SetteeRegistry", "SetteeStorage", "SetteeStreams", "SetteeSubdoc", "SetteeTLS",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
        // The admin REST API, cluster manager and web console (Hummingbird 2).
        // The HTTP server setup every HTTP port shares (admin, views, gateway): request-head deadline, 400 on
        // parse errors.
        .target(
            name: "SetteeHTTPServer",
            dependencies: [
                "SetteeAuth", "SetteeCore",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // Node-to-node HTTP calls (admin and views ports): pinned TLS, Basic auth, a deadline on every call.
        .target(
            name: "SetteePeerHTTP",
            dependencies: [
                "SetteeClusterMap", "SetteeCore", "SetteeTLS",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "SetteeAdmin",
            dependencies: [
                "SetteeAuth", "SetteeClusterMap", "SetteeControl", "SetteeCore", "SetteeDiagnostics",
                "SetteeHTTPServer",
                "SetteeJSON", "SetteePeerHTTP", "SetteeRegistry", "SetteeStorage", "SetteeTLS",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            resources: [.copy("Console/Resources/ui")],
            swiftSettings: swiftSettings
        ),
        // The views port (Hummingbird 2).
        .target(
            name: "SetteeViewsServer",
            dependencies: [
                "SetteeAuth", "SetteeClusterMap", "SetteeCore", "SetteeHTTPServer", "SetteeJSON", "SetteePeerHTTP",
                "SetteeRegistry", "SetteeStorage", "SetteeTLS", "SetteeViews",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The smart client over the cluster map and DCP change streams.
        .target(
            name: "SetteeClient",
            dependencies: [
                "SetteeAuth", "SetteeClusterMap", "SetteeCore", "SetteeJSON", "SetteeProtocol", "SetteeStreams",
                "SetteeSubdoc", "SetteeTLS",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // Replication protocol (gateway and Lite): multipart codec, wire types, endpoints and the replicator.
        .target(
            name: "SetteeReplication",
            dependencies: [
                "SetteeBLIP", "SetteeCore", "SetteeJSON", "SetteeTLS",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPCompression", package: "swift-nio-extras"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The sync gateway: database core over a bucket, REST and websocket `_changes`.
        .target(
            name: "SetteeGateway",
            dependencies: [
                "SetteeAuth", "SetteeBLIP", "SetteeClient", "SetteeClusterMap", "SetteeCore", "SetteeDiagnostics",
                "SetteeDocument", "SetteeHTTPServer", "SetteeJS", "SetteeJSON", "SetteeReplication", "SetteeStorage",
                "SetteeSubdoc",
                "SetteeSync", "SetteeTLS",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // Lite's P2P listener: QR codes of sync URLs, one-time credentials, TLS.
        .target(
            name: "SetteeLiteListener",
            dependencies: [
                "CQREncode", "SetteeBLIP", "SetteeCore", "SetteeHTTPServer", "SetteeJSON", "SetteeReplication",
                "SetteeTLS",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),

        // Executables.
        .executableTarget(
            name: "settee-server",
            dependencies: [
                "SetteeAdmin", "SetteeClusterMap", "SetteeCore", "SetteeDiagnostics", "SetteeHTTPServer", "SetteeNode",
                "SetteeRegistry", "SetteeStorage", "SetteeTLS", "SetteeViews", "SetteeViewsServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "settee-router",
            dependencies: [
                "SetteeAuth", "SetteeClient", "SetteeCore", "SetteeProtocol", "SetteeTLS",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // Backup repositories and restore (ADR 0147): segment format, the per-vBucket plan, the stream and restore shells.
        .target(
            name: "SetteeBackup",
            dependencies: [
                "CLZ4", "SetteeClient", "SetteeCore", "SetteeJSON",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "settee",
            dependencies: [
                "SetteeBackup", "SetteeClient", "SetteeClusterMap", "SetteeCore", "SetteeJSON", "SetteeTLS",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "settee-gateway",
            dependencies: [
                "SetteeCore", "SetteeGateway",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "settee-lite",
            dependencies: [
                "SetteeCore", "SetteeDocument", "SetteeJSON", "SetteeLite", "SetteeLiteListener",
                "SetteeReplication", "SetteeTLS",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The fault harness (`make torture`): clusters in network namespaces, faults, history checks.
        .executableTarget(
            name: "settee-torture",
            dependencies: [
                "SetteeClient", "SetteeCore", "SetteeJSON", "SetteeProtocol", "SetteeTorture",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),

        // Helpers several test targets share (a KV test client, the views oracle, the temporary directory, the fuzz
        // engine); never shipped.
        .target(
            name: "SetteeTestSupport",
            dependencies: [
                "SetteeBLIP", "SetteeCore", "SetteeJS", "SetteeJSON", "SetteeProtocol", "SetteeViews",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
            ],
            path: "Tests/SetteeTestSupport",
            swiftSettings: swiftSettings
        ),

        // Tests.
        .testTarget(
            name: "SetteeDiagnosticsTests",
            dependencies: [
                "SetteeCore", "SetteeDiagnostics", "SetteeJSON", "SetteeTestSupport",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeCoreTests",
            dependencies: [
                "SetteeCore",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeProtocolTests",
            dependencies: [
                "SetteeCore", "SetteeProtocol",
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeClusterMapTests",
            dependencies: [
                "SetteeClusterMap", "SetteeCore", "SetteeJSON",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeControlTests",
            dependencies: [
                "SetteeClusterMap", "SetteeControl", "SetteeCore",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeBackupTests",
            dependencies: [
                "SetteeBackup", "SetteeClient", "SetteeCore", "SetteeJSON", "SetteeTestSupport",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeStreamsTests",
            dependencies: [
                "SetteeCore", "SetteeStreams",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeAuthTests",
            dependencies: [
                "SetteeAuth", "SetteeCore", "SetteeTestSupport",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeJSONTests",
            dependencies: [
                "SetteeCore", "SetteeJSON",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeSubdocTests",
            dependencies: [
                "SetteeCore", "SetteeJSON", "SetteeSubdoc",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeDocumentTests",
            dependencies: [
                "SetteeCore", "SetteeDocument", "SetteeJSON",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeTortureTests",
            dependencies: [
                "SetteeCore", "SetteeTorture",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeStorageTests",
            dependencies: [
                "CSQLite", "SetteeClusterMap", "SetteeCore", "SetteeSQLite", "SetteeStorage", "SetteeStreams",
                "SetteeTestSupport", .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeJSTests",
            dependencies: [
                "SetteeJS"
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeSyncTests",
            dependencies: [
                "SetteeCore", "SetteeJSON", "SetteeSync",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeLiteTests",
            dependencies: [
                "SetteeBLIP", "SetteeCore", "SetteeDocument", "SetteeJSON", "SetteeLite", "SetteeReplication",
                "SetteeSQLite", "SetteeTestSupport",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeViewsTests",
            dependencies: [
                "SetteeClusterMap", "SetteeCore", "SetteeJS", "SetteeJSON", "SetteeSQLite", "SetteeStorage",
                "SetteeStreams", "SetteeTestSupport", "SetteeViews",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeNodeTests",
            dependencies: [
                "SetteeAuth", "SetteeClusterMap", "SetteeCore", "SetteeNode", "SetteeProtocol", "SetteeRegistry",
                "SetteeStorage", "SetteeStreams", "SetteeTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeAdminTests",
            dependencies: [
                "SetteeAdmin", "SetteeAuth", "SetteeClusterMap", "SetteeControl", "SetteeCore", "SetteeDiagnostics",
                "SetteeJSON", "SetteePeerHTTP", "SetteeRegistry", "SetteeStorage", "SetteeTestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeClientTests",
            dependencies: [
                "SetteeClient", "SetteeClusterMap", "SetteeCore", "SetteeJSON", "SetteeProtocol",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeReplicationTests",
            dependencies: [
                "SetteeBLIP", "SetteeCore", "SetteeJSON", "SetteeReplication", "SetteeTestSupport",
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeGatewayTests",
            dependencies: [
                "SetteeClient", "SetteeCore", "SetteeDocument", "SetteeGateway", "SetteeJSON", "SetteeStorage",
                "SetteeSubdoc", "SetteeSync", "SetteeTestSupport",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeGatewayServerTests",
            dependencies: [
                "SetteeBLIP", "SetteeClient", "SetteeCore", "SetteeDiagnostics", "SetteeDocument", "SetteeGateway",
                "SetteeJSON", "SetteeReplication", "SetteeSubdoc", "SetteeSync", "SetteeTLS", "SetteeTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeHTTPServerTests",
            dependencies: [
                "SetteeCore", "SetteeHTTPServer", "SetteeTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeTLSTests",
            dependencies: [
                "SetteeTLS", "SetteeCore", "SetteeTestSupport",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeLiteListenerTests",
            dependencies: [
                "SetteeCore", "SetteeJSON", "SetteeLite", "SetteeLiteListener", "SetteeReplication",
                "SetteeTestSupport",
                "SetteeTLS",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeBLIPTests",
            dependencies: [
                "SetteeBLIP", "SetteeCore",
            ],
            swiftSettings: swiftSettings
        ),
        // Seeded in-process fuzz loops over every parser that takes client or peer bytes (docs/internals/fuzzing.md).
        .testTarget(
            name: "SetteeFuzzTests",
            dependencies: [
                "SetteeAdmin", "SetteeAuth", "SetteeBLIP", "SetteeClusterMap", "SetteeCore", "SetteeDocument",
                "SetteeGateway", "SetteeJSON", "SetteeLite", "SetteeLiteListener", "SetteeProtocol", "SetteeRegistry",
                "SetteeReplication", "SetteeStorage", "SetteeStreams", "SetteeSubdoc", "SetteeTestSupport",
                "SetteeViews", "SetteeViewsServer",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Tests/FuzzTests",
            swiftSettings: swiftSettings
        ),
        // Real settee-server / settee-gateway / settee-lite processes on loopback.
        .testTarget(
            name: "ProcessTests",
            dependencies: [
                "CSQLite", "SetteeAuth", "SetteeBackup", "SetteeClient", "SetteeCore", "SetteeDocument",
                "SetteeGateway",
                "SetteeJSON", "SetteeLite", "SetteeLiteListener", "SetteeProtocol", "SetteeReplication", "SetteeSubdoc",
                "SetteeTestSupport", "SetteeTLS", "SetteeViews",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            exclude: ["sdk", "console"],
            swiftSettings: swiftSettings
        ),

    ]
)
