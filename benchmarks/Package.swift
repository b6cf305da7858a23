// swift-tools-version:6.1
// The benchmark package: its own manifest so load-generator and micro-benchmark dependencies
// (HdrHistogram, ordo-one/benchmark) never reach users of the root package.
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "settee-benchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "settee", path: ".."),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
        // Only the MallocInterposer trait: the default set also pulls a Linux runtime interposer.
        .package(url: "https://github.com/ordo-one/benchmark.git", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        // The load generator's engine: wire codecs, connection handlers, runs and reports.
        .target(
            name: "SetteeBenchKit",
            dependencies: [
                .product(name: "SetteeProtocol", package: "settee"),
                .product(name: "SetteeCore", package: "settee"),
                .product(name: "SetteeClient", package: "settee"),
                .product(name: "SetteeJSON", package: "settee"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "settee-bench",
            dependencies: [
                "SetteeBenchKit",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOPosix", package: "swift-nio"),
                // `settee-bench lite`: Lite against the SQLite wrapper under it.
                .product(name: "SetteeLite", package: "settee"),
                // `settee-bench lite-sync`: Lite's replicator over BLIP and REST against a gateway.
                .product(name: "SetteeReplication", package: "settee"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "SetteeSQLite", package: "settee"),
                .product(name: "SetteeJSON", package: "settee"),
                // `settee-bench views`: the index build through the node's own engine and view code.
                .product(name: "SetteeViews", package: "settee"),
                .product(name: "SetteeStorage", package: "settee"),
                .product(name: "SetteeClusterMap", package: "settee"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // Pure parts of the load generator (request bodies, reply parsing, percentile curves).
        .testTarget(
            name: "SetteeBenchKitTests",
            dependencies: [
                "SetteeBenchKit", .product(name: "SetteeJSON", package: "settee"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "SetteeProtocol", package: "settee"),
                .product(name: "SetteeCore", package: "settee"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // Micro-benchmarks: `swift package benchmark` (see README.md).
        .executableTarget(
            name: "Hotpaths",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "SetteeProtocol", package: "settee"),
                .product(name: "SetteeCore", package: "settee"),
                .product(name: "SetteeStorage", package: "settee"),
                .product(name: "SetteeClusterMap", package: "settee"),
                .product(name: "SetteeJS", package: "settee"),
                .product(name: "SetteeJSON", package: "settee"),
                .product(name: "SetteeGateway", package: "settee"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/Hotpaths",
            swiftSettings: swiftSettings,
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ]
)
