import Foundation
import NIOHTTP1
import SetteeJSON
import SetteeTestSupport
import Testing

/// Couchbase Lite's replication protocol (BLIP on `/db/_blipsync`) on a real `settee-gateway` process, driven by the
/// third-party `pythonblip` 0.3.1 client (an independent BLIP 3 / CBMobile_3 puller, `blip/blip_pull.py`, installed in
/// `.build-py/venv` by `scripts/python-deps.sh`).
@Suite(.serialized, .onTestThreads) struct GatewayBLIPProcessTests {
    /// Proves, on a gateway mounted on a 1-node cluster's bucket (`"server": "http://..."`): documents written over
    /// REST are pulled over BLIP by pythonblip with Basic auth, exactly those of the user's channels (a user-specific
    /// sync-function channel), bodies as written, an attachment fetched with `getAttachment`; the pull's checkpoint
    /// is the REST `_local/checkpoint/<client>` document; a wrong password is 401 (with `WWW-Authenticate`) before
    /// the upgrade, and an unknown subprotocol 400 naming the ones spoken.
    @Test func pythonblipPullsOnlyItsChannelsThroughAClusterBucket() async throws {
        try PythonSDKProcessTests.ensureSDK()
        let node = try ServerProcess.started(name: "gw-blip")
        defer { node.stopAndRemove() }
        try node.initialize(authType: "sasl")
        let config = """
            {"databases": {"demo": {"server": "http://127.0.0.1:\(node.adminPort)", "bucket": "demo",
               "username": "Administrator", "password": "password",
               "users": {"alice": {"password": "secret", "admin_channels": ["red"]}},
               "sync": `function(doc) {channel(doc.channels);}`}}}
            """
        let gw = try GatewayProcess(name: "gw-blip", config: config)
        try gw.start()
        defer { gw.stop() }
        let admin = "http://127.0.0.1:\(gw.adminPort)/demo"
        var expected: [String] = []
        var forbidden: [String] = []
        for i in 0..<12 {
            let channels = i % 3 == 0 ? #"["blue"]"# : i % 3 == 1 ? #"["red"]"# : #"["red","blue"]"#
            let id = "doc\(i)"
            let reply = try await GatewayHTTP.request(
                .PUT, "\(admin)/\(id)", body: Array(#"{"id":"\#(id)","n":\#(i),"channels":\#(channels)}"#.utf8))
            #expect(reply.status == 201, "\(reply.text)")
            if i % 3 == 0 { forbidden.append(id) } else { expected.append(id) }
        }
        let text = "attachment pulled over BLIP"
        let b64 = Data(text.utf8).base64EncodedString()
        let withAttachment = try await GatewayHTTP.request(
            .PUT, "\(admin)/withatt",
            body: Array(
                #"{"id":"withatt","channels":["red"],"_attachments":{"note.txt":{"content_type":"text/plain","data":"\#(b64)"}}}"#
                    .utf8))
        #expect(withAttachment.status == 201, "\(withAttachment.text)")
        expected.append("withatt")

        let out = TestOutput.scratch("gw-blip-pull")
        try FileManager.default.createDirectory(at: out, withIntermediateDirectories: true)
        let log = TestOutput.directory.appendingPathComponent("gw-blip-pull-\(gw.port).out")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let run = try await ChildProcess.run(
            PythonSDKProcessTests.python.path,
            [
                TestOutput.packageRoot.appendingPathComponent("Tests/ProcessTests/blip/blip_pull.py").path,
                "127.0.0.1", String(gw.port), "demo", "alice", "secret", out.path, expected.joined(separator: ","),
                forbidden.joined(separator: ","), "withatt", text,
            ], output: .log(log), timeout: 300)
        PythonSDKProcessTests.expectPassed(
            script: "blip_pull.py", status: run.status, output: run.output, log: log, passes: 7)

        // The pull's checkpoint is a `_local` document REST reads too.
        let client = run.output.split(separator: "\n").first { $0.hasPrefix("CLIENT ") }.map { String($0.dropFirst(7)) }
        let id = try #require(client)
        let escaped = id.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? id
        let checkpoint = try await GatewayHTTP.request(.GET, "\(admin)/_local/checkpoint%2F\(escaped)")
        #expect(checkpoint.status == 200, "\(checkpoint.text)")
        #expect((try? JSON.parse(checkpoint.body))?["remote"] != nil)
    }
}
