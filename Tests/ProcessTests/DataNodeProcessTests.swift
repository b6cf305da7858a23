import Foundation
import NIOCore
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// End-to-end tests of real `settee-server` processes on loopback. Serialized: each starts its own
/// node, and the machine has two cores.
@Suite(.serialized, .onTestThreads) struct DataNodeProcessTests {
    /// Proves the memcached project's own binary-protocol conformance suite (`memccapable -b`, from
    /// Debian's libmemcached-tools) passes against a fresh node, but for FLUSH and FLUSHQ: memccapable cannot
    /// authenticate, and an anonymous connection may not empty a bucket (ADR 0015's anonymous grants). Through
    /// `settee-router`, which authenticates, FLUSH passes too (`RouterProcessTests.memccapableThroughRouter`).
    @Test func memccapablePasses() throws {
        let server = try ServerProcess.started(name: "memccapable")
        defer { server.stopAndRemove() }
        try server.initialize()
        try expectMemccapablePasses(port: server.kvPort, report: "memccapable.txt", refused: ["flush", "flushq"])
    }

    /// Proves crash safety: 100,000 documents (JSON and binary, every 50th durable), then SIGKILL;
    /// after a restart every write acknowledged as durable, or covered by the persisted seqno that
    /// OBSERVE_SEQNO reported before the kill, reads back with identical value, flags, CAS and expiry.
    @Test func killNineLosesNoPersistedWrite() throws {
        let server = try ServerProcess.started(name: "crash")
        defer { server.stopAndRemove() }
        try server.initialize(ramQuotaMB: 512)

        struct Written {
            var key: String
            var value: [UInt8]
            var flags: UInt32
            var expiry: UInt32
            var cas: UInt64
            var vb: UInt16
            var seqno: UInt64
            var vbuuid: UInt64
            var durable: Bool
        }
        let client = try TestKVClient(port: server.kvPort)
        try client.hello([.mutationSeqno, .json, .xerror, .syncReplication, .altRequestSupport])
        var rng = SplitMix64(seed: 0xc0ffee)
        let total = 100_000
        let batch = 1000
        var written: [Written] = []
        written.reserveCapacity(total)
        let now = UInt32(Date().timeIntervalSince1970)
        var i = 0
        while i < total {
            var out = ByteBuffer()
            var pending: [UInt32: Written] = [:]
            for j in i..<min(i + batch, total) {
                let key = "doc-\(j)"
                let json = j % 2 == 0
                let value: [UInt8] =
                    json
                    ? Array(
                        "{\"n\":\(j),\"type\":\"image\",\"owner\":\"user\(j % 97)\",\"pad\":\"\(String(repeating: "x", count: Int(rng.next() % 200)))\"}"
                            .utf8)
                    : (0..<(16 + Int(rng.next() % 300))).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                let flags = UInt32(truncatingIfNeeded: rng.next())
                let expiry: UInt32 = j % 7 == 0 ? now + 86_400 * 3 : 0
                let durable = j % 50 == 0
                let keyBytes = Array(key.utf8)
                let vb = VBucketHash.vbucket(forKey: keyBytes).rawValue
                let op = client.opaque()
                out.writeRequest(
                    opcode: .set, vbucket: vb, opaque: op, datatype: json ? 1 : 0,
                    framingExtras: durable
                        ? FrameInfoParser.durability(.majorityAndPersistActive, timeoutMs: 60_000) : [],
                    extras: TestKVClient.setExtras(flags: flags, expiry: expiry), key: keyBytes, value: value)
                pending[op] = Written(
                    key: key, value: value, flags: flags, expiry: expiry, cas: 0, vb: vb, seqno: 0, vbuuid: 0,
                    durable: durable)
            }
            try client.send(out)
            for _ in 0..<pending.count {
                let r = try client.receive()
                guard var w = pending.removeValue(forKey: r.opaque) else {
                    Issue.record("unexpected opaque \(r.opaque)")
                    continue
                }
                #expect(r.status == .success, "set \(w.key) → \(r.status)")
                guard r.status == .success, let token = r.mutationToken else { continue }
                w.cas = r.cas
                w.vbuuid = token.0
                w.seqno = token.1
                written.append(w)
            }
            i += batch
        }
        #expect(written.count == total)

        // Ask every written vBucket how far it is persisted.
        var uuids: [UInt16: UInt64] = [:]
        for w in written { uuids[w.vb] = w.vbuuid }
        var out = ByteBuffer()
        var asked: [UInt32: UInt16] = [:]
        for (vb, uuid) in uuids {
            let op = client.opaque()
            var v = ByteBuffer()
            v.writeInteger(uuid)
            out.writeRequest(opcode: .observeSeqno, vbucket: vb, opaque: op, value: Array(v.readableBytesView))
            asked[op] = vb
        }
        try client.send(out)
        var persisted: [UInt16: UInt64] = [:]
        for _ in 0..<asked.count {
            let r = try client.receive()
            #expect(r.status == .success)
            let vb = asked[r.opaque]!
            var body = r.value
            _ = body.readInteger(as: UInt8.self)
            #expect(body.readInteger(as: UInt16.self) == vb)
            #expect(body.readInteger(as: UInt64.self) == uuids[vb])
            persisted[vb] = body.readInteger(as: UInt64.self)!
            let current = body.readInteger(as: UInt64.self)!
            #expect(persisted[vb]! <= current)
        }
        let mustSurvive = written.filter { $0.durable || $0.seqno <= persisted[$0.vb, default: 0] }
        #expect(mustSurvive.count >= total / 50)

        server.kill9()
        try server.start(timeout: 300)

        let reader = try TestKVClient(port: server.kvPort)
        try reader.hello([.mutationSeqno, .json, .xerror])
        var k = 0
        var mismatches = 0
        while k < mustSurvive.count {
            let slice = mustSurvive[k..<min(k + batch, mustSurvive.count)]
            var out = ByteBuffer()
            var byOpaque: [UInt32: Written] = [:]
            for w in slice {
                let op = reader.opaque()
                out.writeRequest(opcode: .get, vbucket: w.vb, opaque: op, key: Array(w.key.utf8))
                byOpaque[op] = w
                let op2 = reader.opaque()
                out.writeRequest(opcode: .getMeta, vbucket: w.vb, opaque: op2, extras: [2], key: Array(w.key.utf8))
                byOpaque[op2] = w
            }
            try reader.send(out)
            for _ in 0..<byOpaque.count {
                let r = try reader.receive()
                let w = byOpaque[r.opaque]!
                if r.opcode == .get {
                    if r.status != .success || r.valueBytes != w.value || r.flags != w.flags || r.cas != w.cas {
                        mismatches += 1
                        if mismatches < 5 { Issue.record("\(w.key): status \(r.status) cas \(r.cas) vs \(w.cas)") }
                    }
                } else {
                    let exp = r.extras.getInteger(at: r.extras.readerIndex + 8, as: UInt32.self)
                    if r.status != .success || exp != w.expiry {
                        mismatches += 1
                        if mismatches < 5 {
                            Issue.record("\(w.key): meta status \(r.status) expiry \(exp ?? 0) vs \(w.expiry)")
                        }
                    }
                }
            }
            k += batch
        }
        #expect(mismatches == 0, "\(mismatches) of \(mustSurvive.count) persisted writes differ after kill -9")
        // New writes after restart get CAS values above everything issued before the crash.
        let maxBefore = written.map(\.cas).max() ?? 0
        let r = try reader.request(
            .set, key: "after-restart", value: Array("1".utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0))
        #expect(r.status == .success)
        #expect(r.cas > maxBefore)
        let note =
            "written=\(written.count) reportedPersisted=\(mustSurvive.count) durable=\(written.filter(\.durable).count)\n"
        try? note.write(
            to: TestOutput.directory.appendingPathComponent("crash-test.txt"), atomically: true, encoding: .utf8)
    }

    /// Proves SIGTERM is a clean shutdown: exit status 0, and every write (durable or not) is on disk
    /// when the node comes back.
    @Test func sigtermFlushesEverything() throws {
        let server = try ServerProcess.started(name: "sigterm")
        defer { server.stopAndRemove() }
        try server.initialize()
        let client = try TestKVClient(port: server.kvPort)
        var out = ByteBuffer()
        for j in 0..<2000 {
            out.writeRequest(
                opcode: .setq, vbucket: VBucketHash.vbucket(forKey: Array("k\(j)".utf8)).rawValue, opaque: UInt32(j),
                extras: TestKVClient.setExtras(flags: UInt32(j), expiry: 0), key: Array("k\(j)".utf8),
                value: Array("v\(j)".utf8))
        }
        out.writeRequest(opcode: .noop, opaque: 99_999)
        try client.send(out)
        let noop = try client.receive()
        #expect(noop.opcode == .noop && noop.opaque == 99_999, "quiet sets must not answer on success")
        #expect(server.stop() == 0)
        try server.start()
        let reader = try TestKVClient(port: server.kvPort)
        for j in stride(from: 0, to: 2000, by: 37) {
            let r = try reader.request(.get, key: "k\(j)")
            #expect(r.status == .success)
            #expect(r.valueBytes == Array("v\(j)".utf8))
            #expect(r.flags == UInt32(j))
        }
    }

    /// Proves bad input gets a clear status or a closed connection, never a crash, and that other
    /// clients do not notice: unknown magic, inconsistent lengths, a 21 MiB value (E2BIG, then the
    /// connection keeps working), unknown opcodes, malformed extras, bad frame infos, wrong
    /// passwords, unknown buckets, vBuckets out of range; plus bad admin requests.
    @Test func badInputIsRefusedCleanly() throws {
        let server = try ServerProcess.started(name: "badinput")
        defer { server.stopAndRemove() }
        try server.initialize()

        let bystander = try TestKVClient(port: server.kvPort)
        #expect(
            try bystander.request(
                .set, key: "keep", value: Array("me".utf8), extras: TestKVClient.setExtras(flags: 1, expiry: 0)
            ).status == .success)

        let garbage = try TestKVClient(port: server.kvPort)
        try garbage.send(bytes: Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        #expect(garbage.isClosedByServer())

        let inconsistent = try TestKVClient(port: server.kvPort)
        var bad = ByteBuffer()
        bad.writeRequest(
            opcode: .set, extras: TestKVClient.setExtras(flags: 0, expiry: 0), key: Array("abc".utf8), value: [1])
        bad.setInteger(UInt32(2), at: 8)
        try inconsistent.send(bad)
        #expect(inconsistent.isClosedByServer())

        let big = try TestKVClient(port: server.kvPort)
        let huge = [UInt8](repeating: 0x61, count: 21 * 1024 * 1024)
        let tooBig = try big.request(
            .set, key: "huge", value: huge, extras: TestKVClient.setExtras(flags: 0, expiry: 0))
        #expect(tooBig.status == .valueTooLarge)
        let justFits = [UInt8](repeating: 0x62, count: 20 * 1024 * 1024)
        #expect(
            try big.request(.set, key: "big", value: justFits, extras: TestKVClient.setExtras(flags: 0, expiry: 0))
                .status == .success)
        #expect(try big.request(.get, key: "big").valueBytes.count == justFits.count)
        let over = [UInt8](repeating: 0x63, count: 20 * 1024 * 1024 + 1)
        #expect(
            try big.request(.set, key: "over", value: over, extras: TestKVClient.setExtras(flags: 0, expiry: 0)).status
                == .valueTooLarge)

        let misc = try TestKVClient(port: server.kvPort)
        #expect(try misc.request(Opcode(0x77)).status == .unknownCommand)
        #expect(try misc.request(.set, key: "x", value: [1], extras: [1, 2, 3]).status == .invalidArguments)
        #expect(try misc.request(.get, key: "").status == .invalidArguments)
        #expect(try misc.request(.get, key: String(repeating: "k", count: 251)).status == .invalidArguments)
        #expect(try misc.request(.get, key: "x", vbucket: 4000).status == .notMyVBucket)
        let nmvb = try misc.request(.get, key: "x", vbucket: 1024)
        #expect(nmvb.status == .notMyVBucket)
        #expect(nmvb.datatype == 1)
        #expect(String(decoding: nmvb.valueBytes, as: UTF8.self).contains("vBucketServerMap"))
        #expect(
            try misc.request(
                .set, key: "x", value: [1], extras: TestKVClient.setExtras(flags: 0, expiry: 0),
                framingExtras: [0x13, 0x01]
            ).status == .invalidArguments)
        #expect(
            try misc.request(
                .set, key: "x", value: [1], extras: TestKVClient.setExtras(flags: 0, expiry: 0),
                framingExtras: [0x11, 0x09]
            ).status == .durabilityInvalidLevel)
        #expect(
            try misc.request(
                .set, key: "x", value: [1], extras: TestKVClient.setExtras(flags: 0, expiry: 0), datatype: 0x02
            ).status == .invalidArguments)
        #expect(
            try misc.request(.increment, key: "keep", extras: [UInt8](repeating: 0, count: 20)).status == .deltaBadValue
        )

        let auth = try TestKVClient(port: server.kvPort)
        #expect(try auth.authenticate(user: "Administrator", password: "wrong") == .authError)
        #expect(try auth.request(.saslAuth, key: "PLAIN", value: [0xff, 0x00]).status == .authError)
        #expect(try auth.request(.saslAuth, key: "NOPE", value: []).status == .authError)
        #expect(try auth.authenticate(user: "Administrator", password: "password") == .success)
        #expect(try auth.request(.selectBucket, key: "nosuchbucket").status == .accessDenied)
        #expect(try auth.request(.get, key: "keep").status == .noBucket)
        #expect(try auth.request(.selectBucket, key: "demo").status == .success)
        #expect(try auth.request(.get, key: "keep").status == .success)

        // Admin API.
        #expect(try server.http("GET", "/pools/default/buckets", auth: ("Administrator", "nope")).status == 401)
        #expect(try server.http("GET", "/settings/rbac/users", useAuth: false).status == 401)
        #expect(try server.http("GET", "/pools/default/buckets/nosuch").status == 404)
        let badQuota = try server.http("POST", "/pools/default/buckets", form: [("name", "b2"), ("ramQuotaMB", "5")])
        #expect(badQuota.status == 400)
        #expect(badQuota.text.contains("ramQuota"))
        let dup = try server.http("POST", "/pools/default/buckets", form: [("name", "demo"), ("ramQuotaMB", "100")])
        #expect(dup.status == 400)
        #expect(dup.text.contains("Bucket with given name already exists"))
        let junk = try server.http(
            "POST", "/pools/default/buckets", body: Data([0xff, 0xfe, 0x00, 0x01]),
            contentType: "application/x-www-form-urlencoded")
        #expect(junk.status == 400)

        // Still alive, and the bystander noticed nothing.
        let after = try bystander.request(.get, key: "keep")
        #expect(after.status == .success)
        #expect(after.valueBytes == Array("me".utf8))
        #expect(server.process?.isRunning == true)
    }

    /// Proves pipelined requests are answered in request order, also when a durable write in the
    /// middle has to wait for the flusher, and that an unauthenticated connection is bound to the
    /// single authType=none bucket.
    @Test func pipelineAnswersInOrder() throws {
        let server = try ServerProcess.started(name: "pipeline")
        defer { server.stopAndRemove() }
        try server.initialize()
        let client = try TestKVClient(port: server.kvPort)
        try client.hello([.mutationSeqno, .syncReplication, .altRequestSupport])
        var out = ByteBuffer()
        var expected: [UInt32] = []
        for j in 0..<300 {
            let key = Array("p\(j % 20)".utf8)
            let vb = VBucketHash.vbucket(forKey: key).rawValue
            let op = client.opaque()
            switch j % 3 {
            case 0:
                out.writeRequest(
                    opcode: .set, vbucket: vb, opaque: op,
                    framingExtras: j % 30 == 0 ? FrameInfoParser.durability(.persistToMajority) : [],
                    extras: TestKVClient.setExtras(flags: 0, expiry: 0), key: key, value: Array("\(j)".utf8))
            case 1:
                out.writeRequest(opcode: .get, vbucket: vb, opaque: op, key: key)
            default:
                out.writeRequest(opcode: .noop, opaque: op)
            }
            expected.append(op)
        }
        try client.send(out)
        var got: [UInt32] = []
        for _ in expected { got.append(try client.receive().opaque) }
        #expect(got == expected)
    }

    /// Proves responses stay intact when the client stops reading: 4,000 pipelined GETs of 4 KiB values
    /// (16 MB of answers, far past the socket buffers) are sent in small bursts without reading, so the node's
    /// writes back up while it keeps answering into its reused output buffer; then every answer arrives in
    /// order with its own key's value.
    @Test func slowReaderGetsIntactResponses() throws {
        let server = try ServerProcess.started(name: "slowreader")
        defer { server.stopAndRemove() }
        try server.initialize()
        let client = try TestKVClient(port: server.kvPort)
        let values = (0..<10).map { i in [UInt8](repeating: UInt8(65 + i), count: 4096) }
        for (i, v) in values.enumerated() {
            let r = try client.request(
                .set, key: "slow\(i)", value: v, extras: TestKVClient.setExtras(flags: 0, expiry: 0))
            #expect(r.status == .success)
        }
        var expected: [(opaque: UInt32, key: Int)] = []
        for burst in 0..<400 {
            var out = ByteBuffer()
            for j in 0..<10 {
                let k = (burst + j) % values.count
                let key = Array("slow\(k)".utf8)
                let op = client.opaque()
                out.writeRequest(opcode: .get, vbucket: VBucketHash.vbucket(forKey: key).rawValue, opaque: op, key: key)
                expected.append((op, k))
            }
            try client.send(out)
        }
        usleep(500_000)
        var wrong = 0
        for e in expected {
            let f = try client.receive()
            if f.opaque != e.opaque || f.status != .success || Array(f.value.readableBytesView) != values[e.key] {
                wrong += 1
            }
        }
        #expect(wrong == 0, "\(wrong) of \(expected.count) answers out of order or damaged")
    }
}
