import SetteeBLIP
import SetteeCore
import SetteeJSON
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeReplication

/// Delta sync (ADR 0125) and the `subChanges` bounds of the passive side Lite's listener serves
/// (`BLIPReplicationServer`, ADR 0137), each request handled directly (no socket), over a `MemoryEndpoint`.
@Suite struct BLIPReplicationServerDeltaTests {
    static let long = String(repeating: "0123456789abcdef", count: 64)

    /// A served database holding `d` at `1-a` (a long text) and its child `2-b` (one member more).
    static func served() -> MemoryEndpoint {
        let served = MemoryEndpoint("served")
        served.put("d", rev: "1-a", body: [("text", .string(long)), ("n", .int(1))])
        served.put("d", rev: "2-b", parent: "1-a", body: [("text", .string(long)), ("n", .int(2))])
        return served
    }

    static func request(_ profile: String, _ properties: [(String, String)] = [], body: String = "") -> BLIPMessage {
        BLIPMessage(
            number: 1, properties: [(name: "Profile", value: profile)] + properties.map { (name: $0.0, value: $0.1) },
            body: Array(body.utf8))
    }

    static func refusal(_ m: BLIPMessage) -> (code: String?, text: String) {
        (m.type == .error ? m["Error-Code"] : nil, String(decoding: m.body, as: UTF8.self))
    }

    /// A peer never reached (the requests handled here send nothing back).
    struct NoPeer: BLIPPeer {
        func send(_ request: BLIPMessage) async throws -> BLIPMessage? { throw BLIPConnectionError.closed }
    }

    @Test func pushedDeltasAreAppliedOrRefusedWith422() async throws {
        // Proves: with delta sync on, `proposeChanges` and `changes` answers say `deltas: true`; a `rev` whose
        // `deltaSrc` is unknown, not a revision id, or whose delta does not apply is 422 with Sync Gateway's text and
        // stores nothing; the same revision sent whole afterwards (what a pusher does on 422) is stored; a delta
        // against a stored source is stored as the whole body and counted. With delta sync off, no `deltas`
        // property and a `deltaSrc` is 422.
        let served = Self.served()
        let server = BLIPReplicationServer(endpoint: served)
        let proposed = await server.handle(
            Self.request("proposeChanges", body: #"[["d","3-c","2-b"]]"#), peer: NoPeer())
        #expect(proposed["deltas"] == "true" && String(decoding: proposed.body, as: UTF8.self) == "[]")
        let offered = await server.handle(Self.request("changes", body: #"[[1,"d","3-c"]]"#), peer: NoPeer())
        #expect(offered["deltas"] == "true")

        let rev: [(String, String)] = [("id", "d"), ("rev", "3-c"), ("history", "2-b,1-a")]
        let unknown = await server.handle(
            Self.request("rev", rev + [("deltaSrc", "2-zz")], body: #"{"n":3}"#), peer: NoPeer())
        #expect(Self.refusal(unknown).code == "422" && Self.refusal(unknown).text.contains("Can't fetch doc"))
        let notARev = await server.handle(
            Self.request("rev", rev + [("deltaSrc", "zz")], body: #"{"n":3}"#), peer: NoPeer())
        #expect(Self.refusal(notARev).code == "422" && Self.refusal(notARev).text.contains("Invalid deltaSrc"))
        let malformed = await server.handle(
            Self.request("rev", rev + [("deltaSrc", "2-b")], body: #"{"text":["9999=",0,2]}"#), peer: NoPeer())
        #expect(Self.refusal(malformed).code == "422")
        #expect(Self.refusal(malformed).text.contains("Error patching deltaSrc with delta"))
        #expect(BLIPReplicationServerTests.leaves(served, "d") == ["2-b"])
        let whole = await server.handle(
            Self.request("rev", rev, body: #"{"text":"\#(Self.long)","n":3}"#), peer: NoPeer())
        #expect(whole.type == .response)
        #expect(BLIPReplicationServerTests.leaves(served, "d") == ["3-c"])

        let delta = await server.handle(
            Self.request(
                "rev", [("id", "d"), ("rev", "4-d"), ("history", "3-c,2-b,1-a"), ("deltaSrc", "3-c")],
                body: #"{"n":4}"#), peer: NoPeer())
        #expect(delta.type == .response, "\(Self.refusal(delta))")
        let stored = try #require(try await served.bulkGet([BulkGetRequest(id: "d", rev: "4-d")]).first)
        #expect(stored.body["text"]?.stringValue == Self.long && stored.body["n"]?.intValue == 4)
        #expect(server.deltaStats.deltaPushDocCount == 1)
        server.close()

        let off = BLIPReplicationServer(endpoint: served, deltaSync: false)
        let plain = await off.handle(Self.request("proposeChanges", body: #"[["d","5-e","4-d"]]"#), peer: NoPeer())
        #expect(plain.type == .response && plain["deltas"] == nil)
        let refused = await off.handle(
            Self.request("rev", [("id", "d"), ("rev", "5-e"), ("history", "4-d"), ("deltaSrc", "4-d")], body: "{}"),
            peer: NoPeer())
        #expect(Self.refusal(refused).code == "422")
        off.close()
    }

    /// A puller that answers `changes` naming what it has, and refuses the first `rev` that comes as a delta (422,
    /// as Couchbase Lite answers a delta whose base it lacks); records every `rev`.
    final class DeltaRefusingPeer: BLIPPeer {
        let revs = Mutex<[BLIPMessage]>([])
        let known: String

        init(known: String) { self.known = known }

        func send(_ request: BLIPMessage) async throws -> BLIPMessage? {
            switch request.profile {
            case "changes":
                let entries = (try? JSON.parse(request.body))?.arrayValue ?? []
                let body = JSON.array(entries.map { _ in .array([.string(known)]) }).serialized()
                return BLIPMessage(type: .response, properties: [(name: "deltas", value: "true")], body: body)
            case "rev":
                let refuse = revs.withLock { r in
                    r.append(request)
                    return request["deltaSrc"] != nil && r.count == 1
                }
                if refuse {
                    return .error(answering: request.number, code: 422, message: "Don't have body of deltaSrc")
                }
                return BLIPMessage(type: .response)
            default:
                return BLIPMessage(type: .response)
            }
        }
    }

    @Test func aPullerThatCannotApplyADeltaGetsTheRevisionWhole() async throws {
        // Proves: a puller whose `changes` answer says `deltas: true` and names `1-a` gets `2-b` as a `rev` with
        // `deltaSrc: 1-a` whose body is far smaller than the whole one and rebuilds it exactly against `1-a`; when it
        // answers that delta with 422 the same revision comes again whole, and the feed goes on to its end.
        let served = Self.served()
        let server = BLIPReplicationServer(endpoint: served)
        let peer = DeltaRefusingPeer(known: "1-a")
        let sub = Self.request("subChanges")
        #expect(await server.handle(sub, peer: peer).type == .response)
        await server.responded(to: sub, peer: peer)
        let task = try #require(server.state.withLock { $0.feeds[nil]?.task })
        await task.value
        let revs = peer.revs.withLock { $0 }
        try #require(revs.count == 2, "\(revs.count) revs")
        #expect(revs[0]["deltaSrc"] == "1-a" && revs[1]["deltaSrc"] == nil)
        #expect(revs[0].body.count * 10 < revs[1].body.count, "\(revs[0].body.count) vs \(revs[1].body.count)")
        let source = try #require(try await served.bulkGet([BulkGetRequest(id: "d", rev: "1-a")]).first)
        let rebuilt = try BLIPReplicationWire.applyDelta(revs[0], source: source.body)
        #expect(rebuilt.body == revs[1].body)
        #expect(server.deltaStats.deltasSent == 1 && server.deltaStats.deltaPullReplicationCount == 1)
        server.close()
    }

    @Test func aFloodOfSubChangesStopsAtTheLiveFeedBound() async throws {
        // Proves: a second `subChanges` while one runs is 409; feeds that `unsubChanges` ended but that cannot return
        // (the peer never answers their `changes`) count against Limits.liteListenerBLIPMaxLiveFeeds, and the
        // `subChanges` past it is 429, not another feed; once they return one is accepted again; a malformed
        // `subChanges` is 400 from the shared parser.
        let server = BLIPReplicationServer(endpoint: Self.served())
        let peer = SilentBLIPPeer()
        let sub = Self.request("subChanges", [("continuous", "true")])
        for n in 1...Limits.liteListenerBLIPMaxLiveFeeds {
            #expect(await server.handle(sub, peer: peer).type == .response, "subChanges \(n)")
            await server.responded(to: sub, peer: peer)
            // The feed is stuck only once its first `changes` waits at the peer: a feed task that had not started
            // when `unsubChanges` cancelled it returned at once (a loaded CI run counted 2 live feeds of 4).
            for _ in 0..<2_000 where peer.waiters < n { try await Task.sleep(for: .milliseconds(5)) }
            #expect(peer.waiters == n, "feed \(n): its changes never reached the peer")
            if n == 1 { #expect(Self.refusal(await server.handle(sub, peer: peer)).code == "409") }
            #expect(await server.handle(Self.request("unsubChanges"), peer: peer).type == .response)
        }
        #expect(server.state.withLock { ($0.feeds[nil]?.liveFeeds ?? 0) } == Limits.liteListenerBLIPMaxLiveFeeds)
        #expect(Self.refusal(await server.handle(sub, peer: peer)).code == "429")
        peer.release()
        for _ in 0..<2_000 where server.state.withLock({ ($0.feeds[nil]?.liveFeeds ?? 0) }) > 0 {
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(server.state.withLock { ($0.feeds[nil]?.liveFeeds ?? 0) } == 0)
        #expect(await server.handle(sub, peer: peer).type == .response)
        server.close()
        let fresh = BLIPReplicationServer(endpoint: Self.served())
        let unknown = await fresh.handle(Self.request("subChanges", [("filter", "mine")]), peer: NoPeer())
        #expect(Self.refusal(unknown).code == "400" && Self.refusal(unknown).text.contains("Unknown filter"))
        fresh.close()
    }
}
