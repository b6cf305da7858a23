import SetteeBLIP
import SetteeCore
import SetteeJSON
import Testing

@testable import SetteeGateway

/// A side that only sends (the pushing client of these tests): refuses any request.
private struct SendOnly: BLIPRequestHandler {
    func handle(_ request: BLIPMessage, peer: any BLIPPeer) async -> BLIPMessage {
        .error(answering: request.number, domain: "BLIP", code: 404, message: "no handler")
    }
}

/// The two size bounds a pushed revision meets, through a real BLIP session pair (framing, ACK flow control) with the
/// gateway's handler on the server side: Sync Gateway's 20 MiB document limit (`Limits.maxValueSize`), a per-document
/// refusal, and the BLIP message bound (`Limits.blipMaxIncomingMessageBytes`, 24 MiB), which ends the connection.
@Suite struct BLIPSizeBoundsTests {
    /// A document body of about `bytes` bytes in channel `a`.
    static func body(bytes: Int) -> String {
        #"{"channels":["a"],"pad":""# + String(repeating: "x", count: bytes) + #""}"#
    }

    @Test func aRevisionBetweenTheDocumentLimitAndTheMessageBoundIsRefusedPerDocumentAsRESTRefusesIt() async throws {
        // Proves a 21 MiB `rev` (past the 20 MiB document limit, inside the 24 MiB message bound) is answered with the
        // status and reason REST's PUT gives the same document (413 "Document too large"), is not stored, and the
        // connection stays usable: the next small `rev` on it is written.
        let f = try await Fixture.open()
        let big = Self.body(bytes: 21 * 1024 * 1024)
        var rest: GatewayError?
        let parsed = try JSON.parse(big)
        do { _ = try await f.db.put("rest-big", body: parsed, user: nil) } catch { rest = error }
        #expect(rest?.status == 413)

        let handler = BLIPSyncHandlerTests.handler(f, user: nil)
        let pair = BLIPSessionPair(client: SendOnly(), server: handler)
        let running = Task { await pair.run() }
        let refused = try await pair.client.send(BLIPPushTests.rev("big", "1-aa", body: big))
        #expect(refused?.type == .error)
        #expect(refused?["Error-Domain"] == "HTTP")
        #expect(refused.flatMap(BLIPPushTests.code) == rest?.status)
        #expect(refused.map { String(decoding: $0.body, as: UTF8.self) } == rest?.reason)
        await #expect(throws: GatewayError.self) { try await f.db.get("big", user: nil) }

        let small = try await pair.client.send(BLIPPushTests.rev("small", "1-bb", body: Self.body(bytes: 10)))
        #expect(small?.type == .response)
        #expect(try await f.db.get("small", user: nil).body["_rev"] == .string("1-bb"))

        await pair.client.close()
        let (clientEnd, serverEnd) = await running.value
        #expect(clientEnd == .closedLocally(code: 1000, reason: ""))
        #expect(serverEnd == .closedByPeer)
        handler.close()
        await f.close()
    }

    @Test func aMessagePastTheBLIPBoundEndsTheConnectionWith1009() async throws {
        // Proves a 25 MiB `rev` (past the 24 MiB message bound) is cut off by the framing layer while it arrives: the
        // gateway's session ends with `messageTooLarge` (WebSocket close 1009) instead of buffering it or trapping,
        // the sender's request fails, and nothing is stored.
        let f = try await Fixture.open()
        let handler = BLIPSyncHandlerTests.handler(f, user: nil)
        let pair = BLIPSessionPair(client: SendOnly(), server: handler)
        let running = Task { await pair.run() }
        let huge = BLIPPushTests.rev("huge", "1-cc", body: Self.body(bytes: 25 * 1024 * 1024))
        await #expect(throws: BLIPConnectionError.self) { try await pair.client.send(huge) }
        let (_, serverEnd) = await running.value
        #expect(serverEnd == .protocolError(.messageTooLarge(limit: Limits.blipMaxIncomingMessageBytes)))
        #expect(serverEnd.closeCode == 1009)
        await #expect(throws: GatewayError.self) { try await f.db.get("huge", user: nil) }
        handler.close()
        await f.close()
    }
}
