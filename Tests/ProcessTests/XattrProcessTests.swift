import Foundation
import NIOCore
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

/// Stored extended attributes on real nodes (ADR 0029): written with sub-document XATTR paths, replicated through
/// DCP with INCLUDE_XATTRS, read back from the replica promoted by a failover.
@Suite(.serialized, .onTestThreads) struct XattrProcessTests {
    private static func text(_ frame: Frame) -> String { String(decoding: frame.valueBytes, as: UTF8.self) }
    private static func u16(_ v: Int) -> [UInt8] { [UInt8(v >> 8), UInt8(v & 0xff)] }
    private static func u32(_ v: Int) -> [UInt8] {
        [UInt8(v >> 24), UInt8((v >> 16) & 0xff), UInt8((v >> 8) & 0xff), UInt8(v & 0xff)]
    }
    private static func mutation(_ opcode: UInt8, _ path: String, _ value: String, flags: UInt8) -> [UInt8] {
        [opcode, flags] + u16(path.utf8.count) + u32(value.utf8.count) + Array(path.utf8) + Array(value.utf8)
    }
    private static func lookup(_ path: String, flags: UInt8 = 0x04) -> [UInt8] {
        [0xc5, flags] + u16(path.utf8.count) + Array(path.utf8)
    }
    /// The value of spec `index` in a MULTI_LOOKUP response (`{status u16, length u32, value}`…).
    private static func specs(_ frame: Frame) -> [(status: UInt16, value: String)] {
        var out: [(UInt16, String)] = []
        let v = frame.valueBytes
        var i = 0
        while i + 6 <= v.count {
            let status = UInt16(v[i]) << 8 | UInt16(v[i + 1])
            let n = Int(v[i + 2]) << 24 | Int(v[i + 3]) << 16 | Int(v[i + 4]) << 8 | Int(v[i + 5])
            guard i + 6 + n <= v.count else { break }
            out.append((status, String(decoding: v[(i + 6)..<(i + 6 + n)], as: UTF8.self)))
            i += 6 + n
        }
        return out
    }

    /// Proves on two nodes with one replica: a document given a system XATTR (with `${Mutation.CAS}` expanded) and
    /// a user XATTR through MULTI_MUTATION, and a second document deleted after getting both, reach the replica;
    /// after the active is SIGKILLed and failed over, the new active serves the XATTRs (the CAS macro holds the
    /// write's CAS in little-endian hex), GET answers the body alone without the XATTR datatype bit, and the
    /// tombstone, read with ACCESS_DELETED, kept its system XATTR (status SUCCESS_DELETED) and lost the user one.
    @Test func xattrsSurviveFailover() throws {
        let nodes = try (0..<2).map { try ServerProcess(name: "xattr-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        try ClusterHarness.formCluster(nodes, authType: "none")

        let vb = Int(VBucketHash.vbucket(forKey: Array("xdoc".utf8)).rawValue)
        // A second key in the same vBucket: its deletion is replicated in order with the first document's write.
        let tombKey = try #require(
            (0..<100_000).lazy.map { "tomb-\($0)" }.first {
                Int(VBucketHash.vbucket(forKey: Array($0.utf8)).rawValue) == vb
            })
        var map = try ClusterHarness.map(nodes[0])
        let chain = map.chains[vb]
        let servers = map.servers.map { Int($0.split(separator: ":").last ?? "") ?? -1 }
        let active = try #require(nodes.first { $0.kvPort == servers[chain[0]] })
        let replica = try #require(nodes.first { $0.kvPort != active.kvPort })

        let kv = try TestKVClient(port: active.kvPort)
        try kv.hello([.xattr, .json, .xerror, .mutationSeqno])
        var macroCAS: UInt64 = 0
        for key in [tombKey, "xdoc"] {
            let set = try kv.request(
                .set, key: key, value: Array(#"{"app":"data"}"#.utf8),
                extras: TestKVClient.setExtras(flags: 0, expiry: 0), datatype: 1)
            #expect(set.status == .success)
            let written = try kv.request(
                .subdocMultiMutation, key: key,
                value: Self.mutation(0xc8, "_sync", #"{"rev":"1-a","cas":"${Mutation.CAS}"}"#, flags: 0x04 | 0x10)
                    + Self.mutation(0xc8, "meta.owner", #""ann""#, flags: 0x04 | 0x01))
            #expect(written.status == .success, "\(written.status)")
            macroCAS = written.cas
        }
        #expect(try kv.request(.delete, key: tombKey).status == .success)
        let written = try kv.request(
            .subdocDictUpsert, key: "xdoc", value: Array("_sync.seen".utf8) + Array("true".utf8),
            extras: Self.u16(10) + [0x04])
        #expect(written.status == .success)

        // The replica holds the write once GET_REPLICA reports its CAS (snapshots apply whole, in seqno order).
        let copy = try TestKVClient(port: replica.kvPort)
        try copy.hello([.json])
        let replicated = try ClusterHarness.eventually(20) {
            try copy.request(.getReplica, key: "xdoc").cas == written.cas
        }
        #expect(replicated)

        active.kill9()
        let failover = try replica.http(
            "POST", "/controller/failOver", form: [("otpNode", ClusterHarness.nodeName(active))])
        #expect(failover.status == 200, "\(failover.text)")
        let promoted = try ClusterHarness.eventually(20) {
            map = try ClusterHarness.map(replica)
            let now = map.servers.map { Int($0.split(separator: ":").last ?? "") ?? -1 }
            return now[map.chains[vb][0]] == replica.kvPort
        }
        #expect(promoted)

        let read = try TestKVClient(port: replica.kvPort)
        try read.hello([.xattr, .json, .xerror])
        let got = try read.request(.subdocMultiLookup, key: "xdoc", value: Self.lookup("_sync") + Self.lookup("meta"))
        #expect(got.status == .success, "\(got.status)")
        let values = Self.specs(got)
        // The CAS macro holds the CAS of the write that expanded it, little-endian, as kv_engine writes it.
        let casHex = String(macroCAS.byteSwapped, radix: 16)
        let expected = "0x" + String(repeating: "0", count: 16 - casHex.count) + casHex
        #expect(values.first?.value == #"{"rev":"1-a","cas":"\#(expected)","seen":true}"#, "\(values)")
        #expect(values.count == 2 && values[1].value == #"{"owner":"ann"}"#)
        let body = try read.request(.get, key: "xdoc")
        #expect(body.status == .success && Self.text(body) == #"{"app":"data"}"# && body.datatype & 0x04 == 0)

        let tomb = try read.request(
            .subdocMultiLookup, key: tombKey, value: Self.lookup("_sync.rev") + Self.lookup("meta"),
            extras: [0x04])
        #expect(tomb.status == Status(0xd3), "\(tomb.status)")
        let kept = Self.specs(tomb)
        #expect(kept.count == 2 && kept[0].status == 0 && kept[0].value == #""1-a""# && kept[1].status == 0xc0)
        #expect(try read.request(.get, key: tombKey).status == .keyNotFound)
    }
}
