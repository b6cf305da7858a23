import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import SetteeCore
import SetteeJSON
import SetteeLite
import SetteeReplication
import SetteeTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A `settee-lite` process whose output is collected as it arrives (for `receive`, which runs until
/// stopped), or run to completion.
final class LiteProcess: Sendable {
    static var binary: String { BuiltExecutable.path("settee-lite") }

    private let child: ChildProcess

    init(_ arguments: [String]) throws {
        child = try ChildProcess(Self.binary, arguments, output: .collected)
    }

    var text: String { child.output }
    var isRunning: Bool { child.isRunning }
    /// Its process id (for signals: `receive` rereads its certificate files on SIGHUP).
    var pid: Int32 { child.process.processIdentifier }
    var status: Int32 { child.status }

    /// Waits until `predicate` holds on the output so far; false at the deadline.
    func waitFor(_ seconds: Double, _ predicate: (String) -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if predicate(text) { return true }
            if !isRunning {
                _ = await child.waitForExit(timeout: 0)  // the output readers reach the end
                break
            }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return predicate(text)
    }

    func stop() { child.stop() }

    /// Runs `settee-lite arguments` to completion: exit status and output.
    static func run(_ arguments: [String], timeout: Double = 120) async throws -> (status: Int32, output: String) {
        let run = try await ChildProcess.run(binary, arguments, timeout: timeout)
        return (run.status, run.output)
    }
}

@Suite("Lite apps: seed 000 console and seed 002 photo drop (real processes)", .serialized, .onTestThreads)
struct LiteAppsProcessTests {
    /// Proves `list --live` in one process shows what `attach` in another process saves into the same database
    /// (it never updated before: live queries only heard of their own process's commits).
    @Test func liveListSeesAnotherProcess() async throws {
        let dir = try Self.tempDir("live")
        defer { try? FileManager.default.removeItem(at: dir) }
        let db = dir.appendingPathComponent("console").path
        let files = try Self.images(in: dir, count: 2)
        let live = try LiteProcess(["list", "--db", db, "--live"])
        defer { live.stop() }
        #expect(await live.waitFor(30) { $0.contains("0 image(s)") }, "\(live.text)")
        let attached = try await LiteProcess.run(["attach", "--db", db] + files.map(\.path))
        #expect(attached.status == 0, "\(attached.output)")
        #expect(await live.waitFor(10) { $0.contains("2 image(s)") }, "\(live.text)")
    }

    /// Proves `send` gives up against a peer that is not there: after `--max-attempts` failed attempts it exits
    /// non-zero saying so (it used to retry forever). The message is the proof: a `send` still retrying when `run`'s
    /// 60 s timeout kills it does not print it. (A wall-clock bound of 30 s here failed a CI rehearsal at 32 s, the
    /// test process's waits starved by other suites, not `send`'s backoff.)
    @Test func sendGivesUpOnAnUnreachablePeer() async throws {
        let dir = try Self.tempDir("giveup")
        defer { try? FileManager.default.removeItem(at: dir) }
        let files = try Self.images(in: dir, count: 1)
        let url = "http://u:p@127.0.0.1:\(try freePort())/db"
        let started = Date()
        let sent = try await LiteProcess.run(
            ["send", "--db", dir.appendingPathComponent("a").path, "--max-attempts", "3", url, files[0].path],
            timeout: 60)
        #expect(sent.status != 0, "\(sent.output)")
        #expect(sent.output.contains("gave up after 3 attempts"), "\(sent.output)")
        #expect(Date().timeIntervalSince(started) < 60)
    }

    static func tempDir(_ name: String) throws -> URL {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent(
            "settee-lite-\(name)-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir
    }

    /// Writes `count` fake JPEGs of random bytes (sizes 1 KiB to 300 KiB); returns their paths and bytes.
    static func images(in dir: URL, count: Int, prefix: String = "photo") throws -> [(path: String, bytes: [UInt8])] {
        var rng = SystemRandomNumberGenerator()
        return try (1...count).map { i in
            var bytes: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0]
            bytes += (0..<Int.random(in: 1024...300_000, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng)
            }
            let url = dir.appendingPathComponent("\(prefix)\(i).jpg")
            try Data(bytes).write(to: url)
            return (url.path, bytes)
        }
    }

    static func http(_ url: String, user: String, password: String) async throws -> Int {
        var request = HTTPClientRequest(url: url)
        request.headers.add(name: "Authorization", value: BasicAuth.header(user: user, password: password))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        _ = try? await response.body.collect(upTo: 1 << 20)
        return Int(response.status.code)
    }

    /// Seed 000 end to end: images attached in one `settee-lite` database (the CLI, a real process) are
    /// pushed through a settee-gateway mounted on a real settee-server bucket, and appear byte-identical,
    /// sorted by `timestamp_added`, in a second database's live query (the library, as an app would use
    /// it, pulling continuously); prints how long after the push completed (0.0 s on a quiet machine).
    @Test func seed000ImagesReachAnotherDatabaseLive() async throws {
        let node = try ServerProcess.started(name: "lite-000")
        defer { node.stopAndRemove() }
        try node.initialize(authType: "sasl")
        let config = """
            {"log":["*"],"databases":{"demo":{"server":"http://127.0.0.1:\(node.adminPort)","bucket":"demo",
             "username":"Administrator","password":"password",
             "users":{"GUEST":{"disabled":false,"admin_channels":["*"]}},
             "sync":`function(doc) {channel(doc.channels);}`}}}
            """
        let gateway = try GatewayProcess(name: "lite-000", config: config)
        try gateway.start()
        defer { gateway.stop() }
        let url = "http://127.0.0.1:\(gateway.port)/demo"

        let dir = try Self.tempDir("000")
        defer { try? FileManager.default.removeItem(at: dir) }
        let files = try Self.images(in: dir, count: 4)

        // The phone: a library database pulling continuously, with a live query on the images view.
        let phone = try Database(name: "phone", directory: dir.appendingPathComponent("phone").path)
        let pull = Replicator(
            source: try RemoteEndpoint(url: url), target: LocalEndpoint(phone),
            options: ReplicatorOptions(continuous: true))
        pull.start()
        defer { Task { await pull.stop() } }
        let view = phone.view("images", version: "1") { doc, emit in
            if doc.type == "image", let ts = doc["timestamp_added"] { emit(ts, nil) }
        }
        let seen = Mutex<(rows: [QueryRow], at: Date?)>(([], nil))
        let watcher = Task {
            for await rows in view.query(descending: true).live() where rows.count == files.count {
                seen.withLock { $0 = (rows, Date()) }
                return
            }
        }
        defer { watcher.cancel() }

        // The console: attach, then push once (seed 000's `attach` and `start`).
        let console = dir.appendingPathComponent("console").path
        let attach = try await LiteProcess.run(["attach", "--db", console] + files.map(\.path))
        #expect(attach.status == 0, "\(attach.output)")
        let push = try await LiteProcess.run(["start", "--db", console, url, "--once"])
        let pushed = Date()
        #expect(push.status == 0, "\(push.output)")

        let deadline = Date().addingTimeInterval(60)
        while seen.withLock({ $0.at }) == nil && Date() < deadline { try await Task.sleep(for: .milliseconds(10)) }
        let (rows, at) = seen.withLock { $0 }
        let delay = at.map { $0.timeIntervalSince(pushed) } ?? .infinity
        print(
            "seed 000: \(files.count) images visible in the live query \(String(format: "%.3f", delay)) s after the push finished"
        )
        // The issue asks for 1 s; that is a speed, measured here and reported, not asserted (a loaded CI
        // machine stretches it). Arrival itself is asserted.
        #expect(delay < 60)
        // Newest first, and every image byte-identical to its file.
        let stamps = rows.compactMap { $0.key.numberValue }
        #expect(stamps.count == files.count && stamps == stamps.sorted(by: >))
        var received: [String: [UInt8]] = [:]
        for row in rows {
            let id = try #require(row.documentID)
            let doc = try #require(try phone.document(id))
            let blob = try #require(doc.attachments["image"])
            received[doc["name"]?.stringValue ?? ""] = try phone.content(of: blob)
            #expect(blob.contentType == "image/jpeg")
        }
        for file in files {
            #expect(received[(file.path as NSString).lastPathComponent] == file.bytes)
        }
        // The console's own list shows the same order.
        let list = try await LiteProcess.run(["list", "--db", console])
        let listed = list.output.split(separator: "\n").dropFirst().map { $0.split(separator: "\t")[0] }
        #expect(listed.map { Double($0) ?? 0 } == stamps)
    }

    /// Seed 002 end to end: a receiver listens (printing a one-time URL and QR code); a sender pushes only
    /// the chosen documents; the receiver's change stream reports each and nothing else; wrong
    /// credentials, and the old credentials once the receiver restarted, get 401; the TLS mode works
    /// with the certificate pinned by the URL, and a wrong pin is refused.
    @Test(arguments: [false, true]) func seed002PhotoDrop(tls: Bool) async throws {
        let dir = try Self.tempDir("002")
        defer { try? FileManager.default.removeItem(at: dir) }
        let receiverDB = dir.appendingPathComponent("peerB").path
        let senderDB = dir.appendingPathComponent("peerA").path
        let files = try Self.images(in: dir, count: 3)
        let other = try Self.images(in: dir, count: 1, prefix: "private")
        // A document the sender keeps to itself.
        let kept = try await LiteProcess.run(["attach", "--db", senderDB, other[0].path])
        #expect(kept.status == 0, "\(kept.output)")
        let keptID = String(kept.output.split(separator: "\t").first ?? "")

        let receiver = try LiteProcess(["receive", "--db", receiverDB] + (tls ? ["--tls"] : []))
        defer { receiver.stop() }
        #expect(await receiver.waitFor(30) { $0.contains("QR code saved as") }, "\(receiver.text)")
        let line = receiver.text.split(separator: "\n").first { $0.hasPrefix("sync URL: ") }
        let syncURL = String(try #require(line).dropFirst("sync URL: ".count))
        #expect(syncURL.hasPrefix(tls ? "https://peer-" : "http://peer-"))
        #expect(FileManager.default.fileExists(atPath: receiverDB + "/sync-url.png"))
        let components = try #require(URLComponents(string: syncURL))
        let user = try #require(components.user)
        let password = try #require(components.password)
        let plainBase = "http://127.0.0.1:\(try #require(components.port))/db/"

        if !tls {
            #expect(try await Self.http(plainBase, user: user, password: password) == 200)
            #expect(try await Self.http(plainBase, user: user, password: password + "x") == 401)
            #expect(try await Self.http(plainBase, user: "GUEST", password: "") == 401)
        } else {
            // A well-formed pin of another certificate (its first two hex digits changed; a malformed one is refused
            // before any connection, by `SyncURLPin`).
            let pinAt = try #require(syncURL.range(of: "cert=sha256:")).upperBound
            let firstTwo = syncURL[pinAt...].prefix(2)
            let wrongPin = syncURL.replacingCharacters(
                in: pinAt..<syncURL.index(pinAt, offsetBy: 2), with: firstTwo == "00" ? "11" : "00")
            let refused = try await LiteProcess.run(["send", "--db", senderDB, wrongPin, files[0].path])
            #expect(refused.status != 0, "\(refused.output)")
            #expect(refused.output.contains("not the pinned one"), "\(refused.output)")
            // Without the pin the certificate is untrusted: send stops at once with the reason (it used to
            // retry forever).
            let unpinned = String(syncURL.prefix { $0 != "?" })
            let untrusted = try await LiteProcess.run(["send", "--db", senderDB, unpinned, files[0].path], timeout: 30)
            #expect(untrusted.status != 0, "\(untrusted.output)")
            #expect(untrusted.output.contains("certificate is not trusted"), "\(untrusted.output)")
        }

        let sent = try await LiteProcess.run(["send", "--db", senderDB, syncURL] + files.map(\.path))
        #expect(sent.status == 0, "\(sent.output)")
        let ids = sent.output.split(separator: "\n").filter { $0.hasPrefix("sending ") }.map {
            String($0.split(whereSeparator: { $0 == " " || $0 == "\t" })[1])
        }
        #expect(ids.count == files.count, "\(sent.output)")
        #expect(
            await receiver.waitFor(10) { text in ids.allSatisfy { text.contains("received \($0)") } },
            "\(receiver.text)")
        #expect(!receiver.text.contains("received \(keptID)"))
        let receivedCount = receiver.text.split(separator: "\n").filter { $0.hasPrefix("received ") }.count
        #expect(receivedCount == files.count)
        if tls {
            // The same sync URL over BLIP: `send` dials `wss://` with the pin its URL carries (`SyncURLPin`).
            let blipURL = "wss://" + syncURL.dropFirst("https://".count)
            let overBLIP = try await LiteProcess.run(["send", "--db", senderDB, blipURL, files[0].path])
            #expect(overBLIP.status == 0 && overBLIP.output.contains("sent 1 document"), "\(overBLIP.output)")
            let blipID = overBLIP.output.split(separator: "\n").first { $0.hasPrefix("sending ") }.map {
                String($0.split(whereSeparator: { $0 == " " || $0 == "\t" })[1])
            }
            let id = try #require(blipID, "\(overBLIP.output)")
            #expect(await receiver.waitFor(10) { $0.contains("received \(id)") }, "\(receiver.text)")
        }
        // The bytes arrived intact.
        receiver.stop()
        for (id, file) in zip(ids, files) {
            let out = dir.appendingPathComponent("out-\(id)").path
            let got = try await LiteProcess.run(["get", "--db", receiverDB, id, "--attachment", "image", "--out", out])
            #expect(got.status == 0, "\(got.output)")
            #expect(FileManager.default.contents(atPath: out).map { [UInt8]($0) } == file.bytes)
            // Without --attachment, the document lists its attachment's name, type and length (it did not).
            let shown = try await LiteProcess.run(["get", "--db", receiverDB, id])
            #expect(shown.status == 0, "\(shown.output)")
            #expect(
                shown.output.contains("\"_attachments\":{\"image\":")
                    && shown.output.contains("\"length\":\(file.bytes.count)"), "\(shown.output)")
        }

        // A new session: new credentials; the old ones are refused.
        let again = try LiteProcess(["receive", "--db", receiverDB])
        defer { again.stop() }
        #expect(await again.waitFor(30) { $0.contains("QR code saved as") })
        let newLine = try #require(again.text.split(separator: "\n").first { $0.hasPrefix("sync URL: ") })
        let newComponents = try #require(URLComponents(string: String(newLine.dropFirst("sync URL: ".count))))
        let newBase = "http://127.0.0.1:\(try #require(newComponents.port))/db/"
        #expect(newComponents.user != user && newComponents.password != password)
        #expect(try await Self.http(newBase, user: user, password: password) == 401)
        #expect(
            try await Self.http(
                newBase, user: try #require(newComponents.user), password: try #require(newComponents.password))
                == 200)
    }
}
