// swift-tools-version:6.1
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "settee",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "settee-server", targets: ["settee-server"]),
        .library(name: "SetteeCore", targets: ["SetteeCore"]),
        .library(name: "SetteeProtocol", targets: ["SetteeProtocol"]),
        .library(name: "SetteeStorage", targets: ["SetteeStorage"]),
        .library(name: "SetteeClusterMap", targets: ["SetteeClusterMap"]),
        // For the benchmark package's micro-benchmark of a JavaScript map call.
        .library(name: "SetteeJS", targets: ["SetteeJS"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        // Registry credential hashing (HMAC/SHA-2 for PBKDF2 and SCRAM); never hand-rolled crypto.
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        // Admin console: `/metrics` in Prometheus text format.
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        // Lite's P2P listener: a self-signed TLS identity made at start.
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
    ],
    targets: [
        // C shims: the only places that see C headers.
        .systemLibrary(name: "CLZ4", pkgConfig: "liblz4", providers: [.apt(["liblz4-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        // Views (issue 4): JavaScriptCore shim, JS wrapper, index engine, HTTP shell.
        .systemLibrary(
            name: "CJavaScriptCore", pkgConfig: "javascriptcoregtk-4.1",
            providers: [.apt(["libjavascriptcoregtk-4.1-dev"])]),
        .target(name: "SetteeJS", dependencies: ["CJavaScriptCore", "SetteeCore"], swiftSettings: swiftSettings),
        // Revision trees, rev ids, attachments and document bodies shared by the gateway and Lite.
        .target(
            name: "SetteeDocument",
            dependencies: ["SetteeCore", "SetteeJSON", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeDocumentTests", dependencies: ["SetteeDocument", "SetteeJSON", "SetteeCore"],
            swiftSettings: swiftSettings),
        // Lite's P2P listener (issue 8): QR codes of sync URLs (libqrencode), one-time credentials, TLS.
        .systemLibrary(name: "CQREncode", pkgConfig: "libqrencode", providers: [.apt(["libqrencode-dev"])]),
        .target(
            name: "SetteeLiteListener",
            dependencies: [
                "CQREncode", "SetteeCore", "SetteeJSON", "SetteeReplication",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeLiteListenerTests",
            dependencies: [
                "SetteeLiteListener",
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings),
        // Sync gateway (issue 5): the CouchDB-protocol replication endpoint over a bucket.
        .target(
            name: "SetteeGateway",
            dependencies: [
                "SetteeCore", "SetteeJSON", "SetteeStorage", "SetteeClient", "SetteeAuth",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // One parsed JSON value type (views, gateway, Lite).
        .target(name: "SetteeJSON", dependencies: ["SetteeCore"], swiftSettings: swiftSettings),
        .testTarget(name: "SetteeJSONTests", dependencies: ["SetteeJSON"], swiftSettings: swiftSettings),
        .target(
            name: "SetteeViews",
            dependencies: [
                "SetteeCore", "SetteeJS", "SetteeJSON", "SetteeSQLite", "SetteeStorage", "SetteeClusterMap",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "SetteeViewsServer",
            dependencies: [
                "SetteeCore", "SetteeViews", "SetteeJSON", "SetteeStorage", "SetteeClusterMap", "SetteeAuth",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(name: "SetteeJSTests", dependencies: ["SetteeJS"], swiftSettings: swiftSettings),
        .testTarget(
            name: "SetteeViewsTests",
            dependencies: [
                "SetteeViews", "SetteeViewsServer", "SetteeJS", "SetteeJSON", "SetteeStorage", "SetteeCore",
                "SetteeClusterMap",
                "SetteeTestSupport", .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // Helpers several test targets share (a KV test client, the views oracle); never shipped.
        .target(
            name: "SetteeTestSupport",
            dependencies: [
                "SetteeCore", "SetteeProtocol", "SetteeJS", "SetteeJSON", "SetteeViews",
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Tests/SetteeTestSupport",
            swiftSettings: swiftSettings
        ),

        // Pure values.
        .target(name: "SetteeCore", swiftSettings: swiftSettings),
        .target(
            name: "SetteeProtocol",
            dependencies: ["SetteeCore", .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: swiftSettings
        ),
        .target(name: "SetteeClusterMap", dependencies: ["SetteeCore"], swiftSettings: swiftSettings),
        .target(name: "SetteeStreams", dependencies: ["SetteeCore"], swiftSettings: swiftSettings),
        // The fault harness's pure part: histories, checkers (lost writes, counters, linearizability, split
        // brain), seeded fault schedules and the report. `settee-torture` drives real clusters with it.
        .target(name: "SetteeTorture", dependencies: ["SetteeCore"], swiftSettings: swiftSettings),
        .testTarget(
            name: "SetteeTortureTests", dependencies: ["SetteeTorture", "SetteeCore"], swiftSettings: swiftSettings),
        // SCRAM state machines and RBAC roles (issue 7).
        .target(
            name: "SetteeAuth", dependencies: ["SetteeCore", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: swiftSettings),
        .testTarget(name: "SetteeAuthTests", dependencies: ["SetteeAuth"], swiftSettings: swiftSettings),

        // Engines: disk, no network.
        .target(name: "SetteeSQLite", dependencies: ["CSQLite", "SetteeCore"], swiftSettings: swiftSettings),
        .target(
            name: "SetteeStorage",
            dependencies: [
                "SetteeCore", "SetteeSQLite", "CLZ4", "SetteeClusterMap", "SetteeStreams", "SetteeAuth",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),

        // Shells.
        .target(
            name: "SetteeNode",
            dependencies: [
                "SetteeCore", "SetteeProtocol", "SetteeStorage", "SetteeClusterMap", "SetteeStreams", "SetteeAuth",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "SetteeAdmin",
            dependencies: [
                "SetteeCore", "SetteeStorage", "SetteeClusterMap", "SetteeAuth",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            resources: [.copy("Console/Resources/ui")],
            swiftSettings: swiftSettings
        ),

        // Executables.
        .executableTarget(
            name: "settee-server",
            dependencies: [
                "SetteeViews", "SetteeViewsServer", "SetteeNode", "SetteeAdmin", "SetteeStorage", "SetteeCore",
                "SetteeClusterMap",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),

        // Tests.
        .testTarget(name: "SetteeCoreTests", dependencies: ["SetteeCore"], swiftSettings: swiftSettings),
        .testTarget(
            name: "SetteeProtocolTests",
            dependencies: ["SetteeProtocol", "SetteeCore", .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeClusterMapTests",
            dependencies: ["SetteeClusterMap", "SetteeCore"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeStreamsTests", dependencies: ["SetteeStreams", "SetteeCore"], swiftSettings: swiftSettings),
        .testTarget(
            name: "SetteeStorageTests",
            dependencies: [
                "SetteeStorage", "SetteeSQLite", "SetteeCore", "SetteeClusterMap", "CLZ4", "CSQLite", "SetteeStreams",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeAdminTests",
            dependencies: [
                "SetteeAdmin", "SetteeStorage", "SetteeClusterMap", "SetteeAuth",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeNodeTests",
            dependencies: [
                "SetteeNode", "SetteeStorage", "SetteeProtocol", "SetteeClusterMap", "SetteeCore", "SetteeStreams",
                "SetteeTestSupport", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ProcessTests",
            dependencies: [
                "SetteeViews", "SetteeJS", "SetteeProtocol", "SetteeCore", "CSQLite", "CLZ4", "SetteeAuth",
                "SetteeTestSupport", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            exclude: ["sdk", "console"],
            swiftSettings: swiftSettings
        ),
    ]
)

// Smart client, router and CLI (issue 3 part 5): appended as one block so merges stay trivial.
package.products += [
    .library(name: "SetteeClient", targets: ["SetteeClient"]),
    .executable(name: "settee-router", targets: ["settee-router"]),
    .executable(name: "settee", targets: ["settee"]),
    .executable(name: "settee-torture", targets: ["settee-torture"]),
]
package.targets += [
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
    .target(
        name: "SetteeClient",
        dependencies: [
            "SetteeCore", "SetteeProtocol", "SetteeClusterMap",
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOHTTP1", package: "swift-nio"),
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            .product(name: "Logging", package: "swift-log"),
        ],
        swiftSettings: swiftSettings
    ),
    .executableTarget(
        name: "settee-router",
        dependencies: [
            "SetteeClient", "SetteeCore", "SetteeProtocol",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
        ],
        swiftSettings: swiftSettings
    ),
    .executableTarget(
        name: "settee",
        dependencies: [
            "SetteeClient", "SetteeCore", "SetteeClusterMap",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
        ],
        swiftSettings: swiftSettings
    ),
    .testTarget(
        name: "SetteeClientTests",
        dependencies: [
            "SetteeClient", "SetteeCore", "SetteeProtocol", "SetteeClusterMap",
            .product(name: "NIOCore", package: "swift-nio"),
        ],
        swiftSettings: swiftSettings
    ),
]
// The client process tests drive BucketClient against real nodes.
for target in package.targets where target.name == "ProcessTests" {
    target.dependencies += [
        "SetteeClient", "SetteeClusterMap", .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
    ]
}
// Sync gateway database core (issue 5, helper gwcore): rev trees from SetteeDocument; in-process tests
// over the embedded bucket.
for target in package.targets where target.name == "SetteeGateway" {
    target.dependencies += ["SetteeDocument", "SetteeSync"]
}
package.targets += [
    .testTarget(
        name: "SetteeGatewayTests",
        dependencies: [
            "SetteeGateway", "SetteeDocument", "SetteeJSON", "SetteeCore", "SetteeStorage",
            .product(name: "Logging", package: "swift-log"),
        ],
        swiftSettings: swiftSettings
    )
]

// Replication protocol (issues 5 and 8): multipart codec, wire types, endpoints and the replicator.
package.dependencies += [.package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2")]
package.targets += [
    .target(
        name: "SetteeReplication",
        dependencies: [
            "SetteeCore", "SetteeJSON",
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOHTTP1", package: "swift-nio"),
            .product(name: "NIOHTTPCompression", package: "swift-nio-extras"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "CompressNIO", package: "compress-nio"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "Crypto", package: "swift-crypto"),
        ],
        swiftSettings: swiftSettings
    ),
    .testTarget(
        name: "SetteeReplicationTests",
        dependencies: [
            "SetteeReplication", "SetteeCore", "SetteeJSON",
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "CompressNIO", package: "compress-nio"),
            .product(name: "NIOCore", package: "swift-nio"),
        ],
        swiftSettings: swiftSettings
    ),
]
package.products += [.library(name: "SetteeReplication", targets: ["SetteeReplication"])]

// Sync function, principals and access rules (issue 5, helper "sync"): libxcrypt shim for bcrypt.
package.targets += [
    .systemLibrary(name: "CCrypt", pkgConfig: "libxcrypt", providers: [.apt(["libcrypt-dev"])]),
    .target(
        name: "SetteeSync", dependencies: ["SetteeJS", "SetteeJSON", "SetteeCore", "CCrypt"],
        swiftSettings: swiftSettings),
    .testTarget(
        name: "SetteeSyncTests", dependencies: ["SetteeSync", "SetteeJSON", "SetteeCore"],
        swiftSettings: swiftSettings),
]
// Change streams (issue 5, remote bucket): the client follows DCP with the replicas' stream machine.
for target in package.targets where target.name == "SetteeClient" {
    target.dependencies += ["SetteeStreams"]
}
// The change-stream and gateway-on-a-cluster process tests drive ChangeStream, RemoteBucket and GatewayDatabase.
for target in package.targets where target.name == "ProcessTests" {
    target.dependencies += [
        "SetteeGateway", "SetteeDocument", "SetteeJSON", .product(name: "Logging", package: "swift-log"),
    ]
}
// Lite, the embedded database (issue 8 parts 1-3 and its replication endpoint): appended as one block.
package.products += [.library(name: "SetteeLite", targets: ["SetteeLite"])]
package.targets += [
    .target(
        name: "SetteeLite",
        dependencies: [
            "SetteeCore", "SetteeDocument", "SetteeJSON", "SetteeSQLite", "SetteeReplication",
            .product(name: "Logging", package: "swift-log"),
        ],
        swiftSettings: swiftSettings
    ),
    .testTarget(
        name: "SetteeLiteTests",
        dependencies: [
            "SetteeLite", "SetteeCore", "SetteeDocument", "SetteeJSON", "SetteeSQLite", "SetteeReplication",
            .product(name: "Logging", package: "swift-log"),
        ],
        swiftSettings: swiftSettings
    ),
]

// Sync gateway HTTP shell (issue 5 parts 1-2): websocket `_changes`, gzip bodies, the settee-gateway executable.
package.dependencies += [
    .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
    .package(url: "https://github.com/adam-fowler/compress-nio.git", from: "1.5.0"),
    .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
]
for target in package.targets where target.name == "SetteeGateway" {
    target.dependencies += [
        "SetteeReplication",
        .product(name: "Hummingbird", package: "hummingbird"),
        .product(name: "HummingbirdCore", package: "hummingbird"),
        .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
        .product(name: "CompressNIO", package: "compress-nio"),
        .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOWebSocket", package: "swift-nio"),
        .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
        .product(name: "UnixSignals", package: "swift-service-lifecycle"),
    ]
}
package.products += [.executable(name: "settee-gateway", targets: ["settee-gateway"])]
package.targets += [
    .executableTarget(
        name: "settee-gateway",
        dependencies: [
            "SetteeGateway", "SetteeCore",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ],
        swiftSettings: swiftSettings
    ),
    .testTarget(
        name: "SetteeGatewayServerTests", dependencies: ["SetteeGateway", "SetteeJSON"], swiftSettings: swiftSettings),
]
for target in package.targets where target.name == "ProcessTests" {
    target.dependencies += [
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
        .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
        .product(name: "CompressNIO", package: "compress-nio"), .product(name: "NIOWebSocket", package: "swift-nio"),
    ]
}
// The gateway replication conformance suite drives two settee-gateway processes with the replicator.
for target in package.targets where target.name == "ProcessTests" {
    target.dependencies += ["SetteeReplication"]
}

// Lite's command line (issue 8): the seeds' console and photo-drop apps.
package.products += [.executable(name: "settee-lite", targets: ["settee-lite"])]
package.targets += [
    .executableTarget(
        name: "settee-lite",
        dependencies: [
            "SetteeCore", "SetteeLite", "SetteeLiteListener", "SetteeReplication", "SetteeDocument", "SetteeJSON",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
        ],
        swiftSettings: swiftSettings
    )
]
// The Lite apps' process tests drive the library in-process beside the CLI and gateway processes.
for target in package.targets where target.name == "ProcessTests" {
    target.dependencies += ["SetteeLite", "SetteeLiteListener"]
}

// Seeded in-process fuzz loops over every parser that takes client or peer bytes (docs/internals/fuzzing.md).
package.targets += [
    .testTarget(
        name: "SetteeFuzzTests",
        dependencies: [
            "SetteeCore", "SetteeProtocol", "SetteeJSON", "SetteeDocument", "SetteeReplication", "SetteeStreams",
            "SetteeGateway", "SetteeAdmin", "SetteeViews", "SetteeLite", "SetteeStorage", "SetteeClusterMap",
            "SetteeTestSupport", .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "HummingbirdTesting", package: "hummingbird"),
            .product(name: "Logging", package: "swift-log"),
        ],
        path: "Tests/FuzzTests",
        swiftSettings: swiftSettings
    )
]
