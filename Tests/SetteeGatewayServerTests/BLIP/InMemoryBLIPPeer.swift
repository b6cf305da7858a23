import Logging
import SetteeBLIP
import SetteeGateway
import SetteeJSON
import Synchronization
import Testing

/// The client side of a BLIP connection in memory, for handler tests: records every request the handler sends, in
/// the order sent, and answers each one that wants an answer with `answer`.
final class InMemoryBLIPPeer: BLIPPeer {
    let answer: @Sendable (BLIPMessage) async -> BLIPMessage

    private struct State {
        var log: [BLIPMessage] = []
        var waiters: [(id: Int, count: Int, continuation: CheckedContinuation<Bool, Never>)] = []
        var nextID = 0
    }
    private let state = Mutex(State())

    init(answer: @escaping @Sendable (BLIPMessage) async -> BLIPMessage = InMemoryBLIPPeer.wantsEverything) {
        self.answer = answer
    }

    func send(_ request: BLIPMessage) async throws -> BLIPMessage? {
        let woken = state.withLock { s -> [CheckedContinuation<Bool, Never>] in
            s.log.append(request)
            let ready = s.waiters.filter { $0.count <= s.log.count }
            s.waiters.removeAll { $0.count <= s.log.count }
            return ready.map(\.continuation)
        }
        for c in woken { c.resume(returning: true) }
        if request.noReply { return nil }
        return await answer(request)
    }

    /// Every request sent so far.
    var sent: [BLIPMessage] { state.withLock { $0.log } }

    /// The `index`th request sent (from 0), waiting up to `seconds` for it; nil when it did not come.
    func request(_ index: Int, within seconds: Int = 10) async -> BLIPMessage? {
        let id = state.withLock { s -> Int in
            s.nextID += 1
            return s.nextID
        }
        let arrived = await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
            let now = state.withLock { s -> Bool in
                if s.log.count > index { return true }
                s.waiters.append((id, index + 1, c))
                return false
            }
            if now { c.resume(returning: true) }
            Task {
                try? await Task.sleep(for: .seconds(seconds))
                let late = self.state.withLock { s -> CheckedContinuation<Bool, Never>? in
                    guard let i = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                    return s.waiters.remove(at: i).continuation
                }
                late?.resume(returning: false)
            }
        }
        return arrived ? state.withLock { $0.log[index] } : nil
    }

    /// A client that wants every revision it is offered (`[]` per entry) and answers anything else empty.
    @Sendable static func wantsEverything(_ request: BLIPMessage) async -> BLIPMessage {
        guard request.profile == "changes", let entries = request.json?.arrayValue else {
            return BLIPMessage(type: .response)
        }
        return BLIPMessage(type: .response, body: JSON.array(entries.map { _ in JSON.array([]) }).serialized())
    }
}

extension BLIPMessage {
    /// The body as JSON (nil when it is not).
    var json: JSON? { try? JSON.parse(body) }

    /// A request as a client sends it.
    static func request(_ profile: String, _ properties: [(String, String)] = [], body: String = "") -> BLIPMessage {
        BLIPMessage(
            number: 1, properties: [(name: "Profile", value: profile)] + properties.map { (name: $0.0, value: $0.1) },
            body: Array(body.utf8))
    }
}

/// An embedded walrus bucket and a database on it, closed by `close()`.
struct Fixture {
    let bucket: EmbeddedBucket
    let db: GatewayDatabase

    static func open(_ options: DatabaseOptions = DatabaseOptions(name: "db")) async throws -> Fixture {
        let bucket = try EmbeddedBucket(server: "walrus:", name: "test", logger: quietLogger())
        let db = try await GatewayDatabase(options: options, bucket: bucket, logger: quietLogger())
        return Fixture(bucket: bucket, db: db)
    }

    func close() async {
        await db.close()
        await bucket.close()
    }
}

func quietLogger() -> Logger {
    var l = Logger(label: "settee.gateway.blip-test")
    l.logLevel = .critical
    return l
}

/// Test literals only: a malformed one fails the test that wrote it.
func json(_ text: String) -> JSON {
    do { return try JSON.parse(text) } catch {
        Issue.record("bad JSON literal in a test: \(text)")
        return .null
    }
}

extension BLIPSyncHandler {
    /// `handle` then `responded`, as `BLIPSession` calls them: a `subChanges` feed starts only after its response.
    func subscribe(_ request: BLIPMessage, peer: any BLIPPeer) async -> BLIPMessage {
        let answer = await handle(request, peer: peer)
        await responded(to: request, peer: peer)
        return answer
    }
}
