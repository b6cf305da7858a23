import Foundation
import NIOCore
import SetteeClient
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

/// Issue 67 item 10 on a real node: JSON stored over KV by a client that negotiated no JSON reads back with the JSON
/// datatype, as on Couchbase Server, which sets the bit itself; SDKs and the gateway rely on it.
@Suite(.serialized, .onTestThreads) struct KVJSONDatatypeProcessTests {
    /// Proves a client that never said HELLO (a memcached-era client: no JSON, datatype raw on every request) storing
    /// `{"a":1}` and a 6 KiB JSON document (compressible: written to disk in the LZ4 envelope) has both read back
    /// with datatype JSON (0x01) by the smart client (which negotiates JSON) and by GET_META version 2, bytes
    /// unchanged, while its non-JSON value stays raw; and the same after a restart, from disk.
    @Test func jsonFromAClientWithoutJSONReadsBackAsJSON() async throws {
        let server = try ServerProcess.started(name: "kv-json-datatype")
        defer { server.stopAndRemove() }
        try server.initialize()
        let big = "{\"rows\":[" + (0..<200).map { #"{"n":\#($0),"tag":"settee"}"# }.joined(separator: ",") + "]}"
        let values: [(key: String, body: String, json: Bool)] = [
            ("small", #"{"a":1}"#, true), ("big", big, true), ("text", "not json", false), ("cut", #"{"a":"#, false),
        ]
        let writer = try TestKVClient(port: server.kvPort)
        for v in values {
            let r = try writer.request(
                .set, key: v.key, value: Array(v.body.utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0))
            #expect(r.status == .success, "SET \(v.key)")
        }

        func expectReadBack(_ when: String) async throws {
            let client = try await BucketClient.connect(
                ClientOptions(
                    seeds: [.http(NodeAddress(host: "127.0.0.1", port: server.adminPort))], bucket: "demo",
                    username: server.user, password: server.password, operationTimeoutMs: 60_000,
                    configPollIntervalMs: 0))
            let meta = try TestKVClient(port: server.kvPort)
            try meta.hello([.json])
            for v in values {
                let got = try await client.get(v.key)
                #expect(got.value == Array(v.body.utf8), "\(when): \(v.key)")
                #expect(got.datatype == (v.json ? 0x01 : 0x00), "\(when): \(v.key) datatype \(got.datatype)")
                let m = try meta.request(.getMeta, key: v.key, extras: [0x02])
                #expect(m.status == .success && m.extras.readableBytes == 21, "\(when): GET_META \(v.key)")
                let datatype = m.extras.getInteger(at: m.extras.readerIndex + 20, as: UInt8.self)
                #expect(datatype == (v.json ? 0x01 : 0x00), "\(when): GET_META \(v.key)")
            }
            await client.close()
        }
        try await expectReadBack("in memory")
        #expect(server.stop() == 0)
        try server.start()
        try await expectReadBack("after a restart")
    }
}
