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
    ],
    targets: [
        // C shims: the only places that see C headers.
        .systemLibrary(name: "CLZ4", pkgConfig: "liblz4", providers: [.apt(["liblz4-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),

        // Pure values.
        .target(name: "SetteeCore", swiftSettings: swiftSettings),
        .target(
            name: "SetteeProtocol",
            dependencies: ["SetteeCore", .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: swiftSettings
        ),
        .target(name: "SetteeClusterMap", dependencies: ["SetteeCore"], swiftSettings: swiftSettings),
        .target(name: "SetteeStreams", dependencies: ["SetteeCore"], swiftSettings: swiftSettings),

        // Engines: disk, no network.
        .target(name: "SetteeSQLite", dependencies: ["CSQLite", "SetteeCore"], swiftSettings: swiftSettings),
        .target(
            name: "SetteeStorage",
            dependencies: [
                "SetteeCore", "SetteeSQLite", "CLZ4", "SetteeClusterMap",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),

        // Shells.
        .target(
            name: "SetteeNode",
            dependencies: [
                "SetteeCore", "SetteeProtocol", "SetteeStorage", "SetteeClusterMap",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "SetteeAdmin",
            dependencies: [
                "SetteeCore", "SetteeStorage", "SetteeClusterMap",
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
                "SetteeNode", "SetteeAdmin", "SetteeStorage", "SetteeCore", "SetteeClusterMap",
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
            dependencies: ["SetteeStorage", "SetteeSQLite", "SetteeCore", "SetteeClusterMap", "CLZ4", "CSQLite"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SetteeAdminTests",
            dependencies: [
                "SetteeAdmin", "SetteeStorage", "SetteeClusterMap",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ProcessTests",
            dependencies: [
                "SetteeProtocol", "SetteeCore", "CSQLite", "CLZ4",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            exclude: ["console"],
            swiftSettings: swiftSettings
        ),
    ]
)
