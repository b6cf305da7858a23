import Foundation
import NIOCore
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

/// The bootstrap sequence the Couchbase SDK pipelines (HELLO, SASL, GET_ERROR_MAP, SELECT_BUCKET,
/// GET_CLUSTER_CONFIG), checked on a real process for the shapes the SDK depends on.
@Suite(.serialized, .onTestThreads) struct HandshakeProcessTests {
    /// Proves the handshake answers in order with what the SDK needs: HELLO agrees only to features
    /// we implement; the error map has `version`, `revision` and complete entries (the SDK aborts
    /// otherwise); the bucket config has 1024 chains, `nodesExt` with `$HOST` and our ports, and a
    /// `rev`; mutations carry 16-byte mutation tokens once negotiated.
    @Test func sdkBootstrapSequence() throws {
        let server = try ServerProcess.started(name: "handshake")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        let c = try TestKVClient(port: server.kvPort)

        // HELLO + LIST_MECHS + SASL_AUTH in one write, as the SDK sends them.
        var out = ByteBuffer()
        let asked: [UInt16] = [
            0x03, 0x06, 0x07, 0x08, 0x0b, 0x0c, 0x10, 0x0f, 0x11, 0x15, 0x12, 0x14, 0x0e, 0x0d, 0x1e, 0x0a, 0x04,
        ]
        var helloValue: [UInt8] = []
        for f in asked { helloValue += [UInt8(f >> 8), UInt8(f & 0xff)] }
        out.writeRequest(opcode: .hello, opaque: 1, key: Array("{\"a\":\"tests\"}".utf8), value: helloValue)
        out.writeRequest(opcode: .saslListMechs, opaque: 2)
        out.writeRequest(
            opcode: .saslAuth, opaque: 3, key: Array("PLAIN".utf8),
            value: [0] + Array("Administrator".utf8) + [0] + Array("password".utf8))
        try c.send(out)
        let hello = try c.receive()
        #expect(hello.opaque == 1 && hello.status == .success)
        var agreed: Set<UInt16> = []
        var v = hello.value
        while let f = v.readInteger(as: UInt16.self) { agreed.insert(f) }
        #expect(agreed.isSubset(of: Set(asked)))
        // 0x0e (UnorderedExecution) is implemented: a waiting durable write no longer holds later answers back.
        #expect(agreed.isSuperset(of: [0x03, 0x04, 0x07, 0x0b, 0x0e, 0x10, 0x14]))
        #expect(!agreed.contains(0x0a), "unimplemented features acked: \(agreed)")
        // Collections (0x12) is agreed: keys below carry the default collection's id (0) in front.
        #expect(agreed.contains(0x12))
        let mechs = try c.receive()
        #expect(mechs.opaque == 2 && String(buffer: mechs.value).contains("PLAIN"))
        let auth = try c.receive()
        #expect(auth.opaque == 3 && auth.status == .success)

        // GET_ERROR_MAP + SELECT_BUCKET + GET_CLUSTER_CONFIG, pipelined.
        out = ByteBuffer()
        out.writeRequest(opcode: .getErrorMap, opaque: 4, value: [0, 2])
        out.writeRequest(opcode: .selectBucket, opaque: 5, key: Array("demo".utf8))
        out.writeRequest(opcode: .getClusterConfig, opaque: 6)
        try c.send(out)
        let errorMap = try c.receive()
        #expect(errorMap.opaque == 4 && errorMap.status == .success)
        let map = try #require(try JSONSerialization.jsonObject(with: Data(errorMap.valueBytes)) as? [String: Any])
        #expect(map["version"] != nil && map["revision"] != nil)
        let errors = try #require(map["errors"] as? [String: [String: Any]])
        #expect(errors["86"] != nil)
        for (_, entry) in errors {
            #expect(entry["name"] is String && entry["desc"] is String && entry["attrs"] is [String])
        }
        #expect(try c.receive().status == .success)
        let config = try c.receive()
        #expect(config.opaque == 6 && config.status == .success && config.datatype == 1)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(config.valueBytes)) as? [String: Any])
        #expect((json["rev"] as? Int ?? 0) > 0)
        let vbmap = try #require(json["vBucketServerMap"] as? [String: Any])
        #expect((vbmap["vBucketMap"] as? [[Int]])?.count == 1024)
        let nodes = try #require(json["nodesExt"] as? [[String: Any]])
        #expect(nodes.count == 1)
        let services = try #require(nodes[0]["services"] as? [String: Int])
        #expect(services["kv"] == server.kvPort && services["mgmt"] == server.adminPort)
        #expect(nodes[0]["hostname"] as? String == "$HOST")

        // A mutation now carries (vbuuid, seqno) extras; a second one on the same vBucket has a higher seqno.
        let vb = VBucketHash.vbucket(forKey: Array("tok".utf8)).rawValue
        let first = try c.request(
            .set, key: "\u{0}tok", value: Array("1".utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0),
            vbucket: vb)
        let second = try c.request(
            .set, key: "\u{0}tok", value: Array("2".utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0),
            vbucket: vb)
        let t1 = try #require(first.mutationToken)
        let t2 = try #require(second.mutationToken)
        #expect(t1.0 == t2.0 && t2.1 > t1.1)
        #expect(second.cas > first.cas)
    }

    /// Proves an authType=sasl bucket is not reachable without logging in: an unauthenticated
    /// connection gets NO_BUCKET for data and EACCESS for SELECT_BUCKET.
    @Test func saslBucketNeedsLogin() throws {
        let server = try ServerProcess.started(name: "saslbucket")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        let c = try TestKVClient(port: server.kvPort)
        #expect(try c.request(.get, key: "x").status == .noBucket)
        #expect(try c.request(.selectBucket, key: "demo").status == .accessDenied)
        #expect(try c.authenticate(user: "Administrator", password: "password") == .success)
        #expect(try c.request(.selectBucket, key: "demo").status == .success)
        #expect(try c.request(.get, key: "x").status == .keyNotFound)
    }

    /// Proves server-pushed maps: a connection that agreed Duplex and ClustermapChangeNotification and selected
    /// a bucket receives a 0x82/0x01 server request with the bucket's name, 16 bytes of (revEpoch, rev) and the
    /// config JSON when the bucket's config changes, with a revision newer than the one it had.
    @Test func clustermapChangeNotificationIsPushed() throws {
        let server = try ServerProcess.started(name: "push")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        let c = try TestKVClient(port: server.kvPort)
        try c.hello([.xerror, .selectBucket, .json, .duplex, .clustermapChangeNotification])
        #expect(try c.authenticate(user: "Administrator", password: "password") == .success)
        #expect(try c.request(.selectBucket, key: "demo").status == .success)
        let before = try c.request(.getClusterConfig)
        let old = try #require(try JSONSerialization.jsonObject(with: Data(before.valueBytes)) as? [String: Any])
        let oldRev = old["rev"] as? Int ?? -1

        #expect(try server.http("POST", "/pools/default/buckets/demo", form: [("flushEnabled", "0")]).status == 200)
        let push = try c.receive()
        #expect(push.magic == .serverRequest && push.opcode == .clustermapChangeNotification)
        #expect(String(buffer: push.key) == "demo")
        var extras = push.extras
        let epoch = extras.readInteger(as: Int64.self) ?? -1
        let rev = extras.readInteger(as: Int64.self) ?? -1
        #expect(epoch >= 1 && rev > Int64(oldRev), "pushed \(epoch).\(rev), had \(oldRev)")
        let pushed = try #require(try JSONSerialization.jsonObject(with: Data(push.valueBytes)) as? [String: Any])
        #expect(pushed["rev"] as? Int == Int(rev) && pushed["name"] as? String == "demo")
    }
}
