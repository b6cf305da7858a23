import Logging
import SetteeBLIP
import SetteeCore
import SetteeJSON
import SetteeReplication
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeGateway

/// What a BLIP client can make the gateway's handler hold, each past its named bound (docs/internals/blip.md, "What a
/// client can make the gateway hold"), `unsubChanges`, and the handler's connection and error logs.
@Suite struct BLIPHandlerBoundsTests {
    static func handler(_ f: Fixture, user: String?, logger: Logger = quietLogger()) -> BLIPSyncHandler {
        BLIPSyncHandler(
            db: f.db, user: user.flatMap { f.db.userContext($0) }, subprotocol: .cbMobile3, logger: logger)
    }

    static func code(_ m: BLIPMessage) -> Int? { BLIPSyncHandlerTests.errorCode(m) }

    /// Waits (polling, up to 10 s) until `condition` holds; false if it never does.
    static func eventually(_ condition: () -> Bool) async -> Bool {
        for _ in 0..<2_000 {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return condition()
    }

    @Test func unsubChangesEndsTheSubscriptionSoANewOneMayStart() async throws {
        // Proves: a second subChanges while one runs is 409; unsubChanges answers empty, ends the running feed (its
        // task returns), after which subChanges is accepted again; unsubChanges with nothing subscribed is fine too.
        let f = try await Fixture.open()
        _ = try await f.db.put("d", body: json(#"{"v":1}"#), user: nil)
        let h = Self.handler(f, user: nil)
        let peer = InMemoryBLIPPeer()
        #expect(await h.handle(.request("unsubChanges"), peer: peer).type == .response)
        let first = await h.subscribe(.request("subChanges", [("continuous", "true")]), peer: peer)
        #expect(first.type == .response)
        #expect(Self.code(await h.subscribe(.request("subChanges"), peer: peer)) == 409)
        let task = try #require(h.state.withLock { $0.feeds[nil]?.task })
        #expect(await h.handle(.request("unsubChanges"), peer: peer).type == .response)
        await task.value
        #expect(h.state.withLock { ($0.feeds[nil]?.liveFeeds ?? 0) } == 0)
        let again = await h.subscribe(.request("subChanges", [("continuous", "true")]), peer: peer)
        #expect(again.type == .response)
        #expect(h.state.withLock { ($0.feeds[nil]?.subscribed ?? false) })
        h.close()
        await f.close()
    }

    @Test func aFloodOfSubChangesAndUnsubChangesStopsAtTheLiveFeedBound() async throws {
        // Proves: feeds that unsubChanges ended but that cannot return yet (the client never answers their changes
        // request) count against Limits.gatewayBLIPMaxLiveFeeds; the subChanges past it is 429, not another feed;
        // once they return a subChanges is accepted again.
        let f = try await Fixture.open()
        _ = try await f.db.put("d", body: json(#"{"v":1}"#), user: nil)
        let h = Self.handler(f, user: nil)
        let peer = SilentBLIPPeer()
        for n in 1...Limits.gatewayBLIPMaxLiveFeeds {
            #expect(await h.subscribe(.request("subChanges"), peer: peer).type == .response)
            #expect(await Self.eventually { peer.waiters == n })
            #expect(await h.handle(.request("unsubChanges"), peer: peer).type == .response)
        }
        #expect(h.state.withLock { ($0.feeds[nil]?.liveFeeds ?? 0) } == Limits.gatewayBLIPMaxLiveFeeds)
        #expect(Self.code(await h.subscribe(.request("subChanges"), peer: peer)) == 429)
        #expect(peer.waiters == Limits.gatewayBLIPMaxLiveFeeds)
        peer.release()
        #expect(await Self.eventually { h.state.withLock { ($0.feeds[nil]?.liveFeeds ?? 0) } == 0 })
        #expect(await h.subscribe(.request("subChanges"), peer: peer).type == .response)
        h.close()
        await f.close()
    }

    @Test func aCheckpointPastItsBoundIsRefusedAndNotStored() async throws {
        // Proves: a setCheckpoint body over Limits.gatewayBLIPMaxCheckpointBytes is 413 and nothing is stored; one at
        // the bound's scale below it is stored.
        let f = try await Fixture.open()
        let h = Self.handler(f, user: nil)
        let peer = InMemoryBLIPPeer()
        let big = #"{"local":1,"pad":""# + String(repeating: "x", count: Limits.gatewayBLIPMaxCheckpointBytes) + #""}"#
        let refused = await h.handle(.request("setCheckpoint", [("client", "cp-big")], body: big), peer: peer)
        #expect(Self.code(refused) == 413)
        #expect(Self.code(await h.handle(.request("getCheckpoint", [("client", "cp-big")]), peer: peer)) == 404)
        let small = await h.handle(.request("setCheckpoint", [("client", "cp-ok")], body: #"{"local":1}"#), peer: peer)
        #expect(small["rev"] == "0-1")
        await f.close()
    }

    @Test func docIDsAndChannelListsPastTheirBoundsAreRefused() async throws {
        // Proves: a subChanges whose docIDs or channels list is longer than its bound (Limits.gatewayBLIPMaxDocIDs,
        // Limits.maxChannelsPerGrant) is 400 and starts no feed; a changes or proposeChanges longer than
        // Limits.gatewayBLIPMaxProposedChanges is 400.
        let f = try await Fixture.open()
        let h = Self.handler(f, user: nil)
        let peer = InMemoryBLIPPeer()
        let ids = JSON.array((0...Limits.gatewayBLIPMaxDocIDs).map { .string("d\($0)") })
        let docIDs = String(decoding: JSON.object([("docIDs", ids)]).serialized(), as: UTF8.self)
        #expect(Self.code(await h.subscribe(.request("subChanges", body: docIDs), peer: peer)) == 400)
        let channels = (0...Limits.maxChannelsPerGrant).map { "c\($0)" }.joined(separator: ",")
        let filtered = BLIPMessage.request(
            "subChanges", [("filter", "sync_gateway/bychannel"), ("channels", channels)])
        #expect(Self.code(await h.subscribe(filtered, peer: peer)) == 400)
        #expect(h.state.withLock { !($0.feeds[nil]?.subscribed ?? false) && ($0.feeds[nil]?.liveFeeds ?? 0) == 0 })
        let entries = JSON.array(
            (0...Limits.gatewayBLIPMaxProposedChanges).map { _ in .array([.string("a"), .string("1-a")]) })
        let body = String(decoding: entries.serialized(), as: UTF8.self)
        #expect(Self.code(await h.handle(.request("proposeChanges", body: body), peer: peer)) == 400)
        #expect(Self.code(await h.handle(.request("changes", body: body), peer: peer)) == 400)
        await f.close()
    }

    @Test func theConnectionAndItsFailedRequestsAreLoggedWithUserDataRedacted() async throws {
        // Proves: the connection's start is logged with its user as <ud> user data, subprotocol and peer address;
        // a failed request is logged at info with its profile, status and the document id as <ud>; the close is
        // logged with its code, reason and the messages counted each way.
        let f = try await Fixture.open(
            DatabaseOptions(
                name: "db", syncSource: "function(doc) { requireAccess(doc.channels); channel(doc.channels); }",
                users: ["alice": json(#"{"password":"pass","admin_channels":["a"]}"#)]))
        let log = CapturedLog()
        let h = Self.handler(f, user: "alice", logger: log.logger())
        let peer = InMemoryBLIPPeer()
        h.logOpened(database: "db", peerAddress: "192.0.2.7")
        let opened = try #require(log.records("BLIP sync connection opened").first)
        #expect(opened.level == .info)
        #expect(opened.metadata["user"] == LogText.userData("alice"))
        #expect(opened.metadata["user"] != "alice" || LogText.redactionLevel == .none)
        #expect(opened.metadata["protocol"] == BLIPSubprotocol.cbMobile3.rawValue)
        #expect(opened.metadata["peer"] == "192.0.2.7")

        let rev = BLIPMessage.request(
            "rev", [("id", "secret-doc"), ("rev", "1-a"), ("sequence", "1")], body: #"{"channels":["b"]}"#)
        #expect(Self.code(await h.handle(rev, peer: peer)) == 403)
        #expect(await h.handle(.request("getCheckpoint", [("client", "cp")]), peer: peer).type == .error)
        let failed = log.records("BLIP request failed")
        // The first client's 404 on getCheckpoint is every new client's answer, not logged.
        #expect(failed.count == 1)
        let refusal = try #require(failed.first)
        #expect(refusal.level == .info)
        #expect(refusal.metadata["profile"] == "rev")
        #expect(refusal.metadata["status"] == "403")
        #expect(refusal.metadata["doc"] == LogText.userData("secret-doc"))

        h.logClosed(code: 1000, reason: "bye")
        let closed = try #require(log.records("BLIP sync connection closed").first)
        #expect(closed.metadata["code"] == "1000")
        #expect(closed.metadata["reason"] == "bye")
        #expect(closed.metadata["in"] == "2")
        #expect(closed.metadata["out"] == "2")
        #expect(closed.metadata["errors"] == "2")
        #expect(
            h.traffic == BLIPSyncTraffic(requestsIn: 2, responsesOut: 0, errorsOut: 2, requestsOut: 0, answersIn: 0))
        await f.close()
    }
}
