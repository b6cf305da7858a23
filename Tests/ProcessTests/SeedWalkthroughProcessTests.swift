import Foundation
import SetteeTestSupport
import Testing

/// The seeds' articles followed step by step, each step translated to what a Settee user runs: the console's
/// HTTP calls (curl with the console's session cookie and `ns-server-ui` header, as its pages send them),
/// `settee-gateway` with the article's config, and `settee-lite` for the apps. Each step's comment quotes what
/// the article has the reader do.
@Suite("Seed walkthroughs (real processes)", .serialized, .onTestThreads)
struct SeedWalkthroughProcessTests {
    /// Seed 000 ("Couchbase and Couchbase Lite"): a bucket made in the console with the no-password access control,
    /// the article's gateway config mounting it unchanged but for the port, the gateway's `_sync` documents in
    /// the console's document list, the console app's `start` then `attach`, and the phone's continuous pull with a
    /// live query showing every image, newest first and byte-identical.
    @Test func seed000StepByStep() throws {
        let node = try ConsoleProcessTests.initialisedNode("seed000-walk")
        defer { node.stopAndRemove() }
        let dir = TestOutput.scratch("seed000-walk")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let admin = "http://127.0.0.1:\(node.adminPort)"
        let jar = dir.appendingPathComponent("cookies").path
        /// One console call: the session cookie and the header every console page sends; body, then the status.
        func console(_ arguments: String) throws -> (status: Int, body: String) {
            let run = try ReadmeExamples.shell(
                "curl -s -b '\(jar)' -H 'ns-server-ui: yes' -w '\\n%{http_code}' \(arguments)")
            let lines = run.output.split(separator: "\n", omittingEmptySubsequences: false)
            return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
        }
        func json(_ text: String) -> Any? { try? JSONSerialization.jsonObject(with: Data(text.utf8)) }

        // "Open the administration interface (http://localhost:8091/ by default)": / leads to the console, where
        // the administrator logs in.
        let root = try ReadmeExamples.shell("curl -s -o /dev/null -w '%{http_code} %{redirect_url}' \(admin)/")
        #expect(root.output == "302 \(admin)/ui/", "\(root.output)")
        let login = try ReadmeExamples.shell(
            "curl -s -c '\(jar)' -o /dev/null -w '%{http_code}' -d user=Administrator -d password=password \(admin)/uilogin"
        )
        #expect(login.output == "200", "\(login.output)")

        // "Data Buckets, Create New Data Bucket: name demo, memory quota 100 MB": the form's fields, with the
        // no-password access control the article's gateway config (no credentials) needs.
        let created = try console(
            "-d name=demo -d ramQuota=100 -d replicaNumber=0 -d flushEnabled=0 -d bucketType=couchbase "
                + "-d authType=none \(admin)/pools/default/buckets")
        #expect(created.status == 202, "\(created.body)")

        // "demo appears in the bucket list with a green dot": healthy, on healthy nodes, 100 MB, no password.
        var listed: [String: Any] = [:]
        let green = ReadmeExamples.eventually(30) {
            let buckets = json(try console("\(admin)/pools/default/buckets").body) as? [[String: Any]] ?? []
            listed = buckets.first { $0["name"] as? String == "demo" } ?? [:]
            let nodes = listed["nodes"] as? [[String: Any]] ?? []
            return (listed["status"] as? String ?? "healthy") == "healthy" && !nodes.isEmpty
                && nodes.allSatisfy { $0["status"] as? String == "healthy" }
        }
        #expect(green, "\(listed)")
        #expect((listed["quota"] as? [String: Any])?["ram"] as? Int == 100 * 1024 * 1024)
        #expect(listed["authType"] as? String == "none")

        // "Documents: the new bucket is still empty."
        let empty = json(try console("\(admin)/pools/default/buckets/demo/docs").body) as? [String: Any]
        #expect(empty?["total_rows"] as? Int == 0, "\(String(describing: empty))")

        // "Start Sync Gateway with sync-gateway-config.json": the article's file; only the server's port differs
        // (the listeners' ports are given on the command line).
        let config = try GatewayProcess.fixture("seed000-config.json").replacingOccurrences(
            of: "http://localhost:8091", with: "http://localhost:\(node.adminPort)")
        #expect(config.contains("localhost:\(node.adminPort)"))
        let gateway = try GatewayProcess(name: "seed000-walk", config: config)
        try gateway.start()
        defer { gateway.stop() }
        // "The log says bucket demo is ready as the central store."
        let log = (try? String(contentsOf: gateway.logURL, encoding: .utf8)) ?? ""
        #expect(log.contains("opened database") && log.contains("bucket=demo"), "\(log)")

        // "Refresh the bucket's documents: Sync Gateway's own documents, ids starting with _sync."
        var ids: [String] = []
        #expect(
            ReadmeExamples.eventually(30) {
                let listing = json(try console("\(admin)/pools/default/buckets/demo/docs").body) as? [String: Any]
                ids = (listing?["rows"] as? [[String: Any]])?.compactMap { $0["id"] as? String } ?? []
                return !ids.isEmpty
            }, "no documents after the gateway started")
        #expect(ids.allSatisfy { $0.hasPrefix("_sync") }, "\(ids)")

        // The console app: "start begins replication, attach loads a few images, one document each". The phone:
        // "a continuous pull from http://localhost:4984/demo/ and a live query on the images view".
        let url = "http://localhost:\(gateway.port)/demo/"
        let files = try LiteAppsProcessTests.images(in: dir, count: 3)
        let consoleDB = dir.appendingPathComponent("console").path
        let phoneDB = dir.appendingPathComponent("phone").path
        let start = try LiteProcess(["--db", consoleDB, "start", url])
        defer { start.stop() }
        let phone = try LiteProcess(["--db", phoneDB, "start", url])
        defer { phone.stop() }
        let live = try LiteProcess(["--db", phoneDB, "list", "--live"])
        defer { live.stop() }
        #expect(ReadmeExamples.eventually(30) { live.text.contains("-- 0 image(s)") }, "\(live.text)")
        let attach = try ChildProcess.run(LiteProcess.binary, ["--db", consoleDB, "attach"] + files.map(\.path))
        #expect(attach.status == 0, "\(attach.output)")
        let attachedIDs = attach.output.split(separator: "\n").compactMap { $0.split(separator: "\t").first }.map(
            String.init)
        #expect(attachedIDs.count == files.count, "\(attach.output)")

        // "The data replicates to the device and shows in the app at once": all images, newest first.
        // The listing prints its header, then one row per image: wait for the rows too, not only the header (a read
        // between the two saw one row of three).
        var rows: [[String]] = []
        #expect(
            ReadmeExamples.eventually(60) {
                let text = live.text
                guard text.contains("-- 3 image(s)") else { return false }
                rows = (text.components(separatedBy: "-- 3 image(s)").last ?? "").split(separator: "\n").map {
                    $0.split(separator: "\t").map(String.init)
                }.filter { $0.count == 5 }
                return rows.count >= files.count
            }, "\(live.text)")
        #expect(rows.map { $0[1] } == Array(attachedIDs.reversed()), "\(live.text)")
        // "attachmentNamed(\"image\")": each image's bytes as the console attached them.
        for (id, file) in zip(attachedIDs, files) {
            let out = dir.appendingPathComponent("out-\(id)").path
            let got = try ChildProcess.run(
                LiteProcess.binary, ["--db", phoneDB, "get", id, "--attachment", "image", "--out", out])
            #expect(got.status == 0, "\(got.output)")
            let same = FileManager.default.contents(atPath: out).map { [UInt8]($0) } == file.bytes
            #expect(same, "image \(id) differs from \(file.path)")
        }
        // And the console's document list shows the images in bucket demo.
        let after = json(try console("\(admin)/pools/default/buckets/demo/docs?limit=100").body) as? [String: Any]
        let bucketIDs = Set((after?["rows"] as? [[String: Any]])?.compactMap { $0["id"] as? String } ?? [])
        #expect(Set(attachedIDs).isSubset(of: bucketIDs), "\(bucketIDs)")
    }

    /// Seed 002 ("PhotoDrop"): the receiver's one-time URL with random basic-auth credentials, read back from its
    /// QR code by a real decoder (zbarimg) as the sender's camera would; the sender pushes only the photos it
    /// picked to the scanned URL and reports completion; the receiver reports each arriving document and holds its
    /// bytes; a later send pushes only its new photo; the listener refuses requests without the credentials.
    @Test func seed002StepByStep() async throws {
        let dir = TestOutput.scratch("seed002-walk")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let receiverDB = dir.appendingPathComponent("receiver").path
        let senderDB = dir.appendingPathComponent("sender").path
        let photos = try LiteAppsProcessTests.images(in: dir, count: 3)

        // "The receiver starts a listener on port 0 with basic authentication, a one-time user name and password,
        // and shows the sync URL as a QR code."
        let receiver = try LiteProcess(["--db", receiverDB, "receive"])
        defer { receiver.stop() }
        #expect(await receiver.waitFor(30) { $0.contains("QR code saved as") }, "\(receiver.text)")
        let line = try #require(receiver.text.split(separator: "\n").first { $0.hasPrefix("sync URL: ") })
        let printed = String(line.dropFirst("sync URL: ".count))
        let components = try #require(URLComponents(string: printed))
        #expect((components.user ?? "").count >= 16 && (components.password ?? "").count >= 16, "\(printed)")
        #expect(components.path == "/db" && (components.port ?? 0) > 0, "\(printed)")
        let base = "http://127.0.0.1:\(components.port ?? 0)/db/"
        #expect(try await LiteAppsProcessTests.http(base, user: "", password: "") == 401)

        // "The sender scans the QR code": a real decoder reads the URL back from the saved image.
        // Standard output only: zbarimg also complains on standard error when there is no D-Bus.
        let scan = try await ChildProcess.run(
            "/usr/bin/zbarimg", ["--quiet", "--raw", receiverDB + "/sync-url.png"], output: .collectedApart)
        let scanned = scan.output.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(scan.status == 0 && scanned == printed, "\(scan.output)")

        // "The sender makes a document per photo with the photo attached and pushes with documentIDs set; the
        // status reads Sending Completed."
        let first = try await LiteProcess.run(["--db", senderDB, "send", scanned] + photos[0..<2].map(\.path))
        #expect(first.status == 0 && first.output.contains("sent 2 document(s)"), "\(first.output)")
        func sentIDs(_ output: String) -> [String] {
            output.split(separator: "\n").filter { $0.hasPrefix("sending ") }.map {
                String($0.dropFirst("sending ".count).prefix { $0 != "\t" })
            }
        }
        let ids = sentIDs(first.output)
        #expect(ids.count == 2, "\(first.output)")

        // "The receiver observes database changes and saves each arriving photo."
        #expect(
            await receiver.waitFor(20) { text in ids.allSatisfy { text.contains("received \($0)") } },
            "\(receiver.text)")

        // A second pick: only the new photo travels, though the sender's database holds all three.
        let second = try await LiteProcess.run(["--db", senderDB, "send", scanned, photos[2].path])
        #expect(second.status == 0 && second.output.contains("sent 1 document(s)"), "\(second.output)")
        let third = try #require(sentIDs(second.output).first)
        #expect(await receiver.waitFor(20) { $0.contains("received \(third)") }, "\(receiver.text)")
        try await Task.sleep(for: .milliseconds(300))
        let received = receiver.text.split(separator: "\n").filter { $0.hasPrefix("received ") }
        #expect(received.count == 3, "\(receiver.text)")

        // The photos' bytes, as the receiver saves them.
        receiver.stop()
        for (id, photo) in zip(ids + [third], photos) {
            let out = dir.appendingPathComponent("out-\(id)").path
            let got = try await LiteProcess.run(["--db", receiverDB, "get", id, "--attachment", "image", "--out", out])
            #expect(got.status == 0, "\(got.output)")
            let same = FileManager.default.contents(atPath: out).map { [UInt8]($0) } == photo.bytes
            #expect(same, "photo \(id) differs from \(photo.path)")
        }
    }
}
