import HTTPTypes
import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOWebSocket
import SetteeCore
import SetteeJSON

/// `GET /db/_changes?feed=websocket` (Sync Gateway's websocket feed): after the upgrade the client sends
/// the options as one JSON message (`{"since": ..., "include_docs": true, ...}`, the same names as the
/// query string); the server sends JSON arrays of rows as changes arrive, and one empty array `[]` the
/// first time it has caught up. The feed ends when the client closes or the database goes offline.
extension GatewayResponder {
    typealias WebSocketHandler = WebSocketDataHandler<HTTP1WebSocketUpgradeChannel.Context>

    /// Decides a websocket upgrade: only `_changes?feed=websocket` of an online database, as an
    /// authenticated user on the public port. Anything else goes on as plain HTTP (and gets its error there).
    /// `source`: the peer's host, for the login throttle.
    /// `/db/_blipsync` (Couchbase Lite's BLIP replication) is decided by `blipSyncUpgrade`; `channel` carries its
    /// refusal's answer (`UpgradeRefusalWriter`).
    func shouldUpgrade(
        _ head: HTTPRequest, source: String?, channel: (any Channel)? = nil
    ) async -> ShouldUpgradeResult<WebSocketHandler> {
        // The same parser as every other request's (`dispatch`): a hand-rolled one here trapped on the pair "="
        // (`?=`), before authentication, so any client could stop the gateway.
        let uri = URI(head.path ?? "/")
        let path = uri.path
        if let route = GatewayRoute.resolve(path: path), route.endpoint == .blipSync {
            return await blipSyncUpgrade(head, route: route, source: source, channel: channel)
        }
        var queryItems: [String: String] = [:]
        for (k, v) in uri.queryParameters { queryItems[String(k)] = String(v) }
        guard queryItems["feed"] == "websocket", let route = GatewayRoute.resolve(path: path),
            route.endpoint == .changes, let db = server.keyspace(route.db)?.database, db.isOnline
        else { return .dontUpgrade }
        // Websockets have no CORS preflight: a page of another site could open one with the user's cookie, or, on the
        // admin port (no password, no CORS list), read every change; nor may a page re-pointed at loopback.
        guard
            !refusesHost(head.authority),
            CORSConfig.allowsWebSocket(
                origin: head.headerFields[.origin], host: head.authority, config: admin ? nil : server.config.cors)
        else { return .dontUpgrade }
        var authenticated: UserContext? = nil
        if !admin {
            guard let u = try? await authenticate(headers: head.headerFields, db: db, source: source) else {
                return .dontUpgrade
            }
            authenticated = u
        }
        let logger = server.logger
        let user = authenticated
        let options0 = queryItems
        return .upgrade([:]) { inbound, outbound, _ in
            var messages = inbound.messages(maxSize: 1 << 20).makeAsyncIterator()
            guard let first = try await messages.next() else { return }
            let text: String
            switch first {
            case .text(let s): text = s
            case .binary(let b): text = String(buffer: b)
            }
            let options: ChangesOptions
            do {
                let body =
                    text.isEmpty
                    ? JSON.object([]) : try JSON.parse(text, maxValues: GatewayHTTPLimits.maxRequestJSONValues)
                var p = ChangesOptions.merge(query: options0, body: body)
                p["feed"] = .string("websocket")
                options = try ChangesOptions.parse(p)
            } catch {
                try await outbound.close(.unacceptableData, reason: "bad options: \(error)")
                return
            }
            // A checkpoint from before a purged tombstone's deletion: closed with the reason (ADR 0145).
            do { try db.admitPull(since: options.query.since) } catch {
                try await outbound.close(.policyViolation, reason: (error as? GatewayError)?.reason ?? "\(error)")
                return
            }
            let feed = Task {
                do {
                    try await Self.websocketFeed(db: db, user: user, options: options, outbound: outbound)
                } catch {
                    logger.debug("websocket feed failed", metadata: ["error": "\(error)"])
                }
                try? await outbound.close(.normalClosure, reason: nil)
            }
            // Drains what the client sends; returns when it closes, which ends the feed.
            do {
                while try await messages.next() != nil {}
            } catch {
                feed.cancel()
                throw error
            }
            feed.cancel()
            logger.debug("websocket feed ended", metadata: ["db": "\(route.db)"])
        }
    }

    static func websocketFeed(
        db: GatewayDatabase, user: UserContext?, options: ChangesOptions, outbound: WebSocketOutboundWriter
    ) async throws {
        var q = options.query
        var caughtUp = false
        while db.isOnline && !Task.isCancelled {
            // What is there now, a page at a time (`ChangesPager`).
            var pager = ChangesPager(q)
            // One message per chunk of rows (an array each, as Sync Gateway sends them in batches).
            let wrote = try await pager.forEachChunk(db, user: user) { rows in
                guard !rows.isEmpty else { return }
                var out: [UInt8] = [UInt8(ascii: "[")]
                for (i, row) in rows.enumerated() {
                    if i > 0 { out.append(UInt8(ascii: ",")) }
                    row.json.write(into: &out)
                }
                out.append(UInt8(ascii: "]"))
                try await outbound.write(.text(String(decoding: out, as: UTF8.self)))
            }
            if wrote {
                q.since = pager.lastSeq
                continue
            }
            let moved = pager.lastSeq != q.since
            q.since = pager.lastSeq
            if !caughtUp {
                try await outbound.write(.text("[]"))
                caughtUp = true
            }
            // Short waits so a closed client (task cancelled) ends the feed promptly.
            let changed = await db.waitForChange(
                after: q.since, user: user, channels: q.channels, deadline: .now + .seconds(5))
            if changed && !moved { try? await Task.sleep(for: .milliseconds(50)) }
        }
    }
}
