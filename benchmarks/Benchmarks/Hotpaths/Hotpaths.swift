// Micro-benchmarks of the data node's hot paths, through the public API of the root package:
// frame decode and encode (SetteeProtocol), the vBucket hash (SetteeCore), in-memory get/set and a flusher
// batch commit of the storage engine (SetteeStorage, temporary directory), the LZ4 envelope round trip (its
// `Benchmarks` SPI), a JavaScript view map call (SetteeJS) and the JSON value's parse and serialisation (SetteeJSON). Run: `swift package benchmark` (README.md).
import Benchmark
import Dispatch
import Foundation
import NIOCore
import SetteeClusterMap
import SetteeCore
import SetteeJS
import SetteeJSON
import SetteeProtocol
@_spi(Benchmarks) import SetteeStorage

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        warmupIterations: 10,
        scalingFactor: .kilo,
        maxDuration: .seconds(2),
        maxIterations: 1_000)

    let value = [UInt8](repeating: UInt8(ascii: "v"), count: 1024)
    let key = Array("user::00012345".utf8)

    // A GET hit response as a node writes it: 4 bytes of flags, no key, 1 KiB value.
    var getResponse = ByteBuffer()
    getResponse.writeResponseHeader(
        opcode: .get, status: .success, opaque: 7, cas: 0x1234, extrasLength: 4, valueLength: value.count)
    getResponse.writeInteger(UInt32(0))
    getResponse.writeBytes(value)

    // A SET request as a client writes it.
    var setRequest = ByteBuffer()
    setRequest.writeRequest(
        opcode: .set, vbucket: 115, opaque: 9, extras: [0, 0, 0, 0, 0, 0, 0, 0], key: key, value: value)

    Benchmark("FrameDecoder.decode SET request 1 KiB") { benchmark in
        for _ in benchmark.scaledIterations {
            var b = setRequest
            blackHole(try FrameDecoder.decode(&b, maxBodyLength: 20 << 20))
        }
    }

    Benchmark("FrameDecoder.decode GET response 1 KiB") { benchmark in
        for _ in benchmark.scaledIterations {
            var b = getResponse
            blackHole(try FrameDecoder.decode(&b, maxBodyLength: 20 << 20))
        }
    }

    Benchmark("writeResponseHeader GET hit 1 KiB") { benchmark in
        var out = ByteBuffer()
        out.reserveCapacity(2048)
        for _ in benchmark.scaledIterations {
            out.clear()
            out.writeResponseHeader(
                opcode: .get, status: .success, opaque: 7, cas: 0x1234, extrasLength: 4, valueLength: value.count)
            out.writeInteger(UInt32(0))
            out.writeBytes(value)
            blackHole(out.readableBytes)
        }
    }

    Benchmark("writeResponseHeader SET ok") { benchmark in
        var out = ByteBuffer()
        out.reserveCapacity(64)
        for _ in benchmark.scaledIterations {
            out.clear()
            out.writeResponseHeader(opcode: .set, status: .success, opaque: 9, cas: 0x1235)
            blackHole(out.readableBytes)
        }
    }

    Benchmark("VBucketHash 14-byte key") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(VBucketHash.vbucket(forKey: key))
        }
    }

    Benchmark(
        "BucketEngine.store set 1 KiB (memory, flusher running)",
        configuration: .init(setup: { try EngineFixture.shared.open() }, teardown: { EngineFixture.shared.close() })
    ) { benchmark in
        let engine = EngineFixture.shared.engine
        let keys = EngineFixture.shared.keys
        var i = 0
        for _ in benchmark.scaledIterations {
            let k = keys[i & (keys.count - 1)]
            i &+= 1
            blackHole(
                try engine.store(
                    .set, VBucketHash.vbucket(forKey: k), k, value: value, flags: 0, expiry: 0, datatype: .raw,
                    cas: .zero))
        }
    }

    Benchmark(
        "BucketEngine.get 1 KiB (resident)",
        configuration: .init(
            setup: { try EngineFixture.shared.open(preload: value) }, teardown: { EngineFixture.shared.close() })
    ) { benchmark in
        let engine = EngineFixture.shared.engine
        let keys = EngineFixture.shared.keys
        var i = 0
        for _ in benchmark.scaledIterations {
            let k = keys[i & (keys.count - 1)]
            i &+= 1
            blackHole(try engine.get(VBucketHash.vbucket(forKey: k), k))
        }
    }

    storageAndViewBenchmarks()
    gatewayWriteBenchmarks()
}

/// The micro-benchmarks the suite list names beyond frame and table work: LZ4, the flusher, a JS map call.
let storageAndViewBenchmarks: @Sendable () -> Void = {
    // A 1 KiB JSON document, compressible the way real ones are (repeated field names).
    let json = Array(
        ("{\"type\":\"user\",\"name\":\"jane\",\"tags\":[" + (0..<60).map { "\"tag\($0)\"" }.joined(separator: ",")
            + "],\"pad\":\"" + String(repeating: "x", count: 300) + "\"}").utf8)

    Benchmark("LZ4 envelope round trip 1 KiB JSON (encode + decode + CRC)") { benchmark in
        var envelope = LZ4Envelope()
        for _ in benchmark.scaledIterations {
            let back = try envelope.withEncoded(json) { codec, stored, crc throws(StorageCorruptionError) in
                try LZ4Envelope.decode(
                    codec: Int64(codec.rawValue), stored: stored, length: Int64(json.count), crc: Int64(crc), vb: 0,
                    keyLength: 0)
            }
            blackHole(back.count)
        }
    }

    Benchmark(
        "Flusher batch commit: 1,000 sets of 1 KiB until persisted",
        configuration: .init(
            scalingFactor: .one, maxIterations: 50,
            setup: { try EngineFixture.shared.open() }, teardown: { EngineFixture.shared.close() })
    ) { benchmark in
        let engine = EngineFixture.shared.engine
        let keys = EngineFixture.shared.keys
        var base = 0
        for _ in benchmark.scaledIterations {
            var last: [VBucketID: SeqNo] = [:]
            for i in 0..<1_000 {
                let k = keys[(base + i) & (keys.count - 1)]
                let vb = VBucketHash.vbucket(forKey: k)
                let r = try engine.store(.set, vb, k, value: json, flags: 0, expiry: 0, datatype: .json, cas: .zero)
                last[vb] = r.token.seqno
            }
            base &+= 1_000
            let group = DispatchGroup()
            for (vb, seqno) in last {
                group.enter()
                engine.waitForPersistence(vb, seqno) { _ in group.leave() }
            }
            group.wait()
        }
    }

    // The gateway's and Lite's per-document work: one parse and one serialisation of the 1 KiB document, and of a
    // `_bulk_docs` body of 100 of them (ADR 0113 made scalars inline instead of boxed).
    let bulkDocs = Array(
        ("{\"docs\":["
            + (0..<100).map { i in
                String(decoding: json.dropLast(), as: UTF8.self) + ",\"_id\":\"doc-\(i)\",\"n\":\(i),\"ok\":true}"
            }.joined(separator: ",") + "]}").utf8)

    Benchmark("JSON.parse + serialized, 1 KiB document") { benchmark in
        for _ in benchmark.scaledIterations {
            let parsed = try JSON.parse(json)
            blackHole(parsed.serialized().count)
        }
    }

    Benchmark("JSON.parse + serialized, _bulk_docs of 100 x 1 KiB", configuration: .init(scalingFactor: .one)) {
        benchmark in
        for _ in benchmark.scaledIterations {
            let parsed = try JSON.parse(bulkDocs)
            blackHole(parsed.serialized().count)
        }
    }

    Benchmark("JavaScript view map call (1 KiB JSON doc + meta, one emit)") { benchmark in
        let engine = JSEngine()
        var emitted = 0
        engine.register(name: "emit") { _ throws(JSError) in emitted += 1 }
        let map = try engine.compileFunction(
            "function (doc, meta) { if (doc.type == 'user') emit(doc.name, meta.id); }")
        let meta = Array(#"{"id":"user::1","rev":"1-0","type":"json"}"#.utf8)
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            try engine.call(map, [.json(json), .json(meta)])
        }
        benchmark.stopMeasurement()
        blackHole(emitted)
    }
}

/// A bucket engine in a temporary directory, opened for one benchmark and destroyed after it.
final class EngineFixture: @unchecked Sendable {
    static let shared = EngineFixture()
    /// 65,536 keys (a power of two, so the index wraps with a mask).
    let keys: [[UInt8]] = (0..<65_536).map { Array("bench::\($0)".utf8) }
    // Set in the setup hook and read by the benchmark closure afterwards; the runner calls them in turn.
    private var current: (BucketEngine, String)?

    var engine: BucketEngine { current!.0 }

    func open(preload: [UInt8]? = nil) throws {
        let dir = NSTemporaryDirectory() + "settee-hotpaths-\(UUID().uuidString)"
        let settings = BucketSettings(
            name: "hotpaths", uuid: "0123456789abcdef0123456789abcdef", ramQuotaMB: 1024, replicaNumber: 0)
        let engine = try BucketEngine(settings: settings, directory: dir)
        if let preload {
            for k in keys {
                _ = try engine.store(
                    .set, VBucketHash.vbucket(forKey: k), k, value: preload, flags: 0, expiry: 0, datatype: .raw,
                    cas: .zero)
            }
        }
        current = (engine, dir)
    }

    func close() {
        guard let (engine, dir) = current else { return }
        engine.shutdown()
        try? FileManager.default.removeItem(atPath: dir)
        current = nil
    }
}
