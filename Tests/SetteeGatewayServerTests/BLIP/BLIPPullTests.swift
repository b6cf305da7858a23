import Foundation
import SetteeBLIP
import SetteeCore
import SetteeDocument
import SetteeJSON
import Testing

@testable import SetteeGateway

/// `subChanges` feeds: what a Couchbase Lite puller is sent (`changes` batches, `rev`s, the caught-up empty
/// `changes`), filtered by the user's channels as REST `_changes` is, in order, one-shot and continuous.
@Suite struct BLIPPullTests {
    static let users: [String: JSON] = [
        "alice": json(#"{"password":"pass","admin_channels":["a"]}"#),
        "carol": json(#"{"password":"pass","admin_channels":["a","c"]}"#),
    ]

    static func open(allowConflicts: Bool = true) async throws -> Fixture {
        try await Fixture.open(DatabaseOptions(name: "db", allowConflicts: allowConflicts, users: users))
    }

    static func handler(_ f: Fixture, _ user: String?, _ p: BLIPSubprotocol = .cbMobile3) -> BLIPSyncHandler {
        BLIPSyncHandlerTests.handler(f, user: user, subprotocol: p)
    }

    /// The ids of a `changes` request's entries.
    static func ids(_ m: BLIPMessage) -> [String] {
        (m.json?.arrayValue ?? []).compactMap { $0.arrayValue?[1].stringValue }
    }

    @Test func aOneShotPullSeesOnlyTheUsersChannels() async throws {
        // Proves: a user's pull offers exactly the documents of its channels (never one of another channel), then
        // says it is caught up with an empty `changes`, then sends each wanted revision as a no-reply `rev` with
        // id, rev, sequence and the body without `_id`/`_rev`; the sequences are the REST feed's.
        let f = try await Self.open()
        var expected: [String: String] = [:]
        for i in 0..<6 {
            let ch = i % 2 == 0 ? "a" : "b"
            let rev = try await f.db.put("doc\(i)", body: json(#"{"n":\#(i),"channels":["\#(ch)"]}"#), user: nil)
            if ch == "a" { expected["doc\(i)"] = rev.description }
        }
        let h = Self.handler(f, "alice")
        let peer = InMemoryBLIPPeer()
        let answer = await h.subscribe(.request("subChanges", [("batch", "200")]), peer: peer)
        #expect(answer.type == .response)
        let changes = try #require(await peer.request(0))
        #expect(changes.profile == "changes")
        #expect(Set(Self.ids(changes)) == Set(expected.keys))
        let caughtUp = try #require(await peer.request(1))
        #expect(caughtUp.profile == "changes")
        #expect(caughtUp.noReply)
        #expect(caughtUp.json == json("[]"))
        let rest = try await f.db.changes(ChangesQuery(), user: f.db.userContext("alice"))
        for (i, entry) in (changes.json?.arrayValue ?? []).enumerated() {
            let rev = try #require(await peer.request(2 + i))
            #expect(rev.profile == "rev")
            #expect(rev.noReply)
            let id = try #require(rev["id"])
            #expect(rev["rev"] == expected[id])
            #expect(rev["sequence"] == String(decoding: try #require(entry.arrayValue?[0]).serialized(), as: UTF8.self))
            #expect(rest.rows.contains { $0.id == id && $0.seq.json == entry.arrayValue?[0] })
            #expect(rev.json?["_id"] == nil && rev.json?["_rev"] == nil)
            #expect(rev.json?["channels"] == json(#"["a"]"#))
        }
        #expect(peer.sent.count == 2 + expected.count)
        await f.close()
    }

    /// More documents than two read-ahead chunks, `d0` … with `{"n": i}` in channel `a`, written in order.
    static let readAheadCount = Limits.gatewayBLIPRevReadAhead * 2 + 5

    static func openWithReadAheadDocuments() async throws -> Fixture {
        let f = try await Self.open()
        for i in 0..<readAheadCount {
            _ = try await f.db.put("d\(i)", body: json(#"{"n":\#(i),"channels":["a"]}"#), user: nil)
        }
        return f
    }

    /// Alice's one-shot pull into `peer` in one `changes` batch: its entries, after checking it offered every document
    /// and then said it is caught up (requests 0 and 1; the revisions follow from request 2).
    static func pullAsAlice(_ f: Fixture, peer: InMemoryBLIPPeer) async throws -> [JSON] {
        _ = await Self.handler(f, "alice").subscribe(.request("subChanges", [("batch", "1000")]), peer: peer)
        let entries = try #require(await peer.request(0)).json?.arrayValue ?? []
        #expect(entries.count == readAheadCount, "the changes request offered \(entries.count) entries")
        #expect(try #require(await peer.request(1)).json == json("[]"), "no caught-up changes request after the offer")
        return entries
    }

    @Test func revisionsGoInTheOrderOfferedWhenReadAheadConcurrently() async throws {
        // Proves: with more wanted revisions than `Limits.gatewayBLIPRevReadAhead` (read concurrently, a chunk at a
        // time), every `rev` is sent once, in exactly the order the `changes` request offered them, each with its
        // own document's body and sequence.
        let f = try await Self.openWithReadAheadDocuments()
        let peer = InMemoryBLIPPeer()
        let entries = try await Self.pullAsAlice(f, peer: peer)
        for (i, entry) in entries.enumerated() {
            let rev = try #require(await peer.request(2 + i))
            #expect(rev.profile == "rev")
            #expect(rev["id"] == entry.arrayValue?[1].stringValue)
            #expect(rev["sequence"] == String(decoding: try #require(entry.arrayValue?[0]).serialized(), as: UTF8.self))
            #expect(rev.json?["n"]?.intValue.map { "d\($0)" } == rev["id"])
        }
        #expect(peer.sent.count == 2 + Self.readAheadCount)
        await f.close()
    }

    @Test func aRevisionThatCannotBeReadGoesAsANorevInItsPlaceWithinAReadAheadChunk() async throws {
        // Proves: a wanted revision whose read fails (its document purged between the offer and the read) is sent as
        // a `norev` naming it, in its own place among the chunk's `rev`s, in the first chunk and in a later one; the
        // revisions around it are sent whole and in order, none twice.
        let f = try await Self.openWithReadAheadDocuments()
        let purged: Set<String> = ["d3", "d\(Limits.gatewayBLIPRevReadAhead + 4)"]
        let db = f.db
        let peer = InMemoryBLIPPeer { request in
            if request.profile == "changes", !(request.json?.arrayValue ?? []).isEmpty {
                _ = try? await db.purge(Dictionary(uniqueKeysWithValues: purged.map { ($0, ["*"]) }))
            }
            return await InMemoryBLIPPeer.wantsEverything(request)
        }
        let entries = try await Self.pullAsAlice(f, peer: peer)
        var norevs: [String] = []
        for (i, entry) in entries.enumerated() {
            let m = try #require(await peer.request(2 + i))
            let id = try #require(entry.arrayValue?[1].stringValue)
            #expect(m["id"] == id)
            #expect(m["rev"] == entry.arrayValue?[2].stringValue)
            #expect(m["sequence"] == String(decoding: try #require(entry.arrayValue?[0]).serialized(), as: UTF8.self))
            if purged.contains(id) {
                #expect(m.profile == "norev")
                #expect(m["error"] == "404")
                norevs.append(id)
            } else {
                #expect(m.profile == "rev")
                #expect(m.json?["n"]?.intValue.map { "d\($0)" } == id)
            }
        }
        #expect(Set(norevs) == purged && norevs.count == purged.count)
        #expect(peer.sent.count == 2 + Self.readAheadCount)
        await f.close()
    }

    @Test func batchesFollowTheBatchSizeAndHistoryStopsAtWhatTheClientHas() async throws {
        // Proves: `batch` cuts the offers (at least 10 a message); a revision's `history` lists its ancestors newest
        // first and stops at the first one the client said it has; `maxHistory` bounds it.
        let f = try await Self.open()
        var revs: [RevID] = []
        var rev = try await f.db.put("deep", body: json(#"{"v":0,"channels":["a"]}"#), user: nil)
        revs.append(rev)
        for v in 1..<5 {
            rev = try await f.db.put("deep", body: json(#"{"_rev":"\#(rev)","v":\#(v),"channels":["a"]}"#), user: nil)
            revs.append(rev)
        }
        for i in 0..<25 { _ = try await f.db.put("n\(i)", body: json(#"{"channels":["a"]}"#), user: nil) }
        let known = revs[1].description
        let peer = InMemoryBLIPPeer { request in
            guard request.profile == "changes", let entries = request.json?.arrayValue else {
                return BLIPMessage(type: .response)
            }
            let answer = entries.map { e -> JSON in
                e.arrayValue?[1].stringValue == "deep" ? .array([.string(known)]) : .number(0)
            }
            return BLIPMessage(type: .response, body: JSON.array(answer).serialized())
        }
        let h = Self.handler(f, "alice")
        _ = await h.subscribe(.request("subChanges", [("batch", "3")]), peer: peer)
        var offered = 0
        var index = 0
        var history: String? = nil
        var caughtUp = false
        while !caughtUp || history == nil, let m = await peer.request(index) {
            index += 1
            if m.profile == "changes" {
                let n = Self.ids(m).count
                caughtUp = caughtUp || n == 0
                #expect(n <= 10)
                offered += n
            } else if m.profile == "rev", m["id"] == "deep" {
                history = m["history"]
            }
        }
        #expect(offered == 26)
        #expect(history == [revs[3], revs[2], revs[1]].map(\.description).joined(separator: ","))
        await f.close()
    }

    @Test func aChannelFilterNarrowsTheFeed() async throws {
        let f = try await Self.open()
        for (id, ch) in [("x", "a"), ("y", "c"), ("z", "b")] {
            _ = try await f.db.put(id, body: json(#"{"channels":["\#(ch)"]}"#), user: nil)
        }
        let peer = InMemoryBLIPPeer()
        _ = await Self.handler(f, "carol").subscribe(
            .request("subChanges", [("filter", "sync_gateway/bychannel"), ("channels", "c,b")]), peer: peer)
        let changes = try #require(await peer.request(0))
        #expect(Self.ids(changes) == ["y"])
        await f.close()
    }

    @Test func deletionsCarryTheSubprotocolsFlagAndActiveOnlySkipsThem() async throws {
        // Proves: a tombstone is offered as [seq, id, rev, 1] under CBMobile_3 and [seq, id, rev, true] under
        // CBMobile_2, its `rev` says deleted=1; activeOnly leaves it out.
        let f = try await Self.open()
        let r = try await f.db.put("gone", body: json(#"{"channels":["a"]}"#), user: nil)
        let tomb = try await f.db.put(
            "gone", body: json(#"{"_rev":"\#(r)","_deleted":true,"channels":["a"]}"#), user: nil)
        _ = try await f.db.put("here", body: json(#"{"channels":["a"]}"#), user: nil)
        for (p, flag) in [(BLIPSubprotocol.cbMobile3, JSON.integer(1)), (.cbMobile2, .bool(true))] {
            let peer = InMemoryBLIPPeer()
            _ = await Self.handler(f, "alice", p).subscribe(.request("subChanges"), peer: peer)
            let changes = try #require(await peer.request(0))
            let entry = try #require(changes.json?.arrayValue?.first { $0.arrayValue?[1] == .string("gone") })
            #expect(entry.arrayValue?.count == 4)
            #expect(entry.arrayValue?[3] == flag)
            var index = 2
            while let m = await peer.request(index), m["id"] != "gone" { index += 1 }
            let rev = try #require(await peer.request(index))
            #expect(rev["rev"] == tomb.description)
            #expect(rev["deleted"] == "1")
        }
        let active = InMemoryBLIPPeer()
        _ = await Self.handler(f, "alice").subscribe(.request("subChanges", [("activeOnly", "true")]), peer: active)
        #expect(Self.ids(try #require(await active.request(0))) == ["here"])
        await f.close()
    }

    @Test func aContinuousFeedSendsLaterWritesOfTheUsersChannelsOnly() async throws {
        // Proves: after the caught-up message a continuous feed stays open; a REST write in another channel sends
        // nothing, the next one in the user's channel is offered and sent; a second subChanges meanwhile is 409;
        // closing the handler ends the feed.
        let f = try await Self.open()
        _ = try await f.db.put("first", body: json(#"{"channels":["a"]}"#), user: nil)
        let h = Self.handler(f, "alice")
        let peer = InMemoryBLIPPeer()
        _ = await h.subscribe(.request("subChanges", [("continuous", "true")]), peer: peer)
        #expect(Self.ids(try #require(await peer.request(0))) == ["first"])
        #expect(try #require(await peer.request(1)).json == json("[]"))
        #expect(try #require(await peer.request(2))["id"] == "first")
        let second = await h.subscribe(.request("subChanges"), peer: peer)
        #expect(BLIPSyncHandlerTests.errorCode(second) == 409)
        _ = try await f.db.put("other", body: json(#"{"channels":["b"]}"#), user: nil)
        let later = try await f.db.put("later", body: json(#"{"v":2,"channels":["a"]}"#), user: nil)
        let offer = try #require(await peer.request(3))
        #expect(Self.ids(offer) == ["later"])
        let rev = try #require(await peer.request(4))
        #expect(rev["id"] == "later")
        #expect(rev["rev"] == later.description)
        h.close()
        await f.close()
    }

    @Test func aRemovalIsARevocationOnlyForClientsThatAskForThem() async throws {
        // Proves: a document that left every channel of the user is offered with flag 4 to a CBMobile_3 client
        // that asked for revocations, its revision a `_removed` stub; one that did not ask is not offered it.
        let f = try await Self.open()
        let r1 = try await f.db.put("moving", body: json(#"{"channels":["a"]}"#), user: nil)
        let since = try await f.db.changes(ChangesQuery(), user: nil).lastSeq
        _ = try await f.db.put("moving", body: json(#"{"_rev":"\#(r1)","channels":["b"]}"#), user: nil)
        _ = try await f.db.put("marker", body: json(#"{"channels":["a"]}"#), user: nil)
        let asking = InMemoryBLIPPeer()
        _ = await Self.handler(f, "alice").subscribe(
            .request("subChanges", [("since", since.description), ("revocations", "true")]), peer: asking)
        let offer = try #require(await asking.request(0))
        let entry = try #require(offer.json?.arrayValue?.first { $0.arrayValue?[1] == .string("moving") })
        #expect(entry.arrayValue?[3] == .integer(4))
        var index = 2
        while let m = await asking.request(index), m["id"] != "moving" { index += 1 }
        #expect(try #require(await asking.request(index)).json == json(#"{"_removed":true}"#))
        let plain = InMemoryBLIPPeer()
        _ = await Self.handler(f, "alice").subscribe(
            .request("subChanges", [("since", since.description)]), peer: plain)
        #expect(Self.ids(try #require(await plain.request(0))) == ["marker"])
        await f.close()
    }
}
