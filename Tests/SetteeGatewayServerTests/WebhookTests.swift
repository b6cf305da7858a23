import SetteeCore
import SetteeGateway
import Testing

/// The pure parts of webhooks: config parsing, lanes, the bounded queue and the retry decision.
@Suite struct WebhookTests {
    static func config(_ eventHandlers: String) throws(ConfigError) -> GatewayConfig {
        try GatewayConfig.parse(Array(#"{"databases": {"db": {"event_handlers": \#(eventHandlers)}}}"#.utf8))
    }

    /// Sync Gateway 1.x's shape parses: `wait_for_process` as a string of milliseconds, `timeout` 0 meaning 60 s,
    /// a backquoted filter; defaults 500 and 100 ms.
    @Test func parsesSyncGatewayShape() throws {
        let c = try Self.config(
            #"{"max_processes": 8, "wait_for_process": "250", "document_changed": [{"handler": "webhook", "url": "http://h:1/a", "timeout": 0}, {"handler": "webhook", "url": "https://h/b", "filter": `function(doc){return doc.x;}`, "timeout": 5}]}"#
        )
        let e = try #require(c.databases.first?.eventHandlers)
        #expect(e.maxProcesses == 8 && e.waitForProcessMs == 250)
        #expect(
            e.documentChanged == [
                .init(url: "http://h:1/a", filter: nil, timeoutSeconds: 60),
                .init(url: "https://h/b", filter: "function(doc){return doc.x;}", timeoutSeconds: 5),
            ])
        let d = try #require(try Self.config(#"{"document_changed": []}"#).databases.first?.eventHandlers)
        #expect(d.maxProcesses == 500 && d.waitForProcessMs == 100 && d.documentChanged.isEmpty)
    }

    /// Wrong handlers, URLs, numbers and unknown fields are refused with their path.
    @Test(arguments: [
        (#"{"document_changed": [{"handler": "exec", "url": "http://h/"}]}"#, "handler"),
        (#"{"document_changed": [{"handler": "webhook", "url": "ftp://h/"}]}"#, "url"),
        (#"{"document_changed": [{"handler": "webhook", "url": "http://h/", "colour": 1}]}"#, "colour"),
        (#"{"max_processes": 0, "document_changed": []}"#, "max_processes"),
        (#"{"wait_for_process": "soon", "document_changed": []}"#, "wait_for_process"),
        (#"{"document_changed": {}}"#, "document_changed"),
    ])
    func refusesBadConfig(_ json: String, _ field: String) {
        do {
            _ = try Self.config(json)
            Issue.record("accepted \(json)")
        } catch {
            #expect(error.path.contains(field), "\(error.path): \(error.message)")
        }
    }

    /// A document always maps to the same lane, within range; different documents spread over lanes.
    @Test func lanesAreStablePerDocument() {
        let lanes = WebhookPolicy.lanes(maxProcesses: 500)
        #expect(lanes == Limits.webhookMaxLanes)
        #expect(WebhookPolicy.lanes(maxProcesses: 3) == 3)
        var used = Set<Int>()
        for i in 0..<200 {
            let l = WebhookPolicy.lane(of: "doc\(i)", lanes: lanes)
            #expect(l == WebhookPolicy.lane(of: "doc\(i)", lanes: lanes) && (0..<lanes).contains(l))
            used.insert(l)
        }
        #expect(used.count == lanes)
        #expect(WebhookPolicy.lane(of: "x", lanes: 1) == 0)
    }

    /// The queue keeps each lane's order and refuses events beyond its capacity.
    @Test func queueIsBoundedAndOrderedPerLane() {
        var q = WebhookQueue<Int>(lanes: 2, capacity: 3)
        let accepted = [q.offer(1, lane: 0), q.offer(2, lane: 1), q.offer(3, lane: 0), q.offer(4, lane: 1)]
        #expect(accepted == [true, true, true, false])
        let badLane = q.offer(5, lane: 7)
        #expect(!badLane)
        let lane0 = [q.take(lane: 0), q.take(lane: 0), q.take(lane: 0)]
        #expect(lane0 == [1, 3, nil])
        let room = q.offer(4, lane: 1)
        #expect(room && q.count == 2)
        let lane1 = [q.take(lane: 1), q.take(lane: 1)]
        #expect(lane1 == [2, 4])
    }

    /// 2xx delivers; no answer, 408, 429 and 5xx retry with doubling delays up to the attempt limit; other
    /// statuses give up at once.
    @Test func retryDecisions() {
        #expect(WebhookPolicy.next(after: .status(204), attempt: 1) == .delivered)
        #expect(WebhookPolicy.next(after: .status(500), attempt: 1) == .retry(afterMs: Limits.webhookRetryBaseMs))
        #expect(WebhookPolicy.next(after: .noAnswer, attempt: 2) == .retry(afterMs: 2 * Limits.webhookRetryBaseMs))
        #expect(WebhookPolicy.next(after: .status(429), attempt: 1) == .retry(afterMs: Limits.webhookRetryBaseMs))
        #expect(WebhookPolicy.next(after: .status(503), attempt: Limits.webhookMaxAttempts) == .giveUp)
        #expect(WebhookPolicy.next(after: .status(404), attempt: 1) == .giveUp)
        #expect(WebhookPolicy.next(after: .status(400), attempt: 1) == .giveUp)
    }

    /// `/_expvar` is an admin-port route only.
    @Test func expvarRoute() {
        #expect(GatewayRoute.match(method: "GET", path: "/_expvar", admin: true) == .route(GatewayRoute(.expvar)))
        #expect(GatewayRoute.match(method: "GET", path: "/_expvar", admin: false) == .notFound)
    }
}
