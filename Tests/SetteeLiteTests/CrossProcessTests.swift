import Foundation
import SetteeCore
import SetteeJSON
import SetteeTestSupport
import Testing

@testable import SetteeLite

/// Two `Database` objects on one file behave as two processes do (each has its own SQLite connections).
@Suite struct CrossProcessTests {
    /// Proves writers on two connections never reuse each other's sequences: each transaction reads the last
    /// committed sequence under the write lock. Before, the second writer reused the first one's sequence
    /// and the change feed lost a document.
    @Test func sequencesStayUniqueAcrossConnections() throws {
        try withTwoConnections { a, b in
            _ = try a.save(Document(id: "a1", properties: ["n": 1]))
            _ = try b.save(Document(id: "b1", properties: ["n": 2]))
            _ = try a.save(Document(id: "a2", properties: ["n": 3]))
            _ = try b.save(Document(id: "b2", properties: ["n": 4]))
            for db in [a, b] {
                let feed = try db.changes(since: .zero)
                #expect(Set(feed.map(\.id)) == ["a1", "b1", "a2", "b2"])
                #expect(Set(feed.map(\.sequence)).count == 4)
                #expect(db.lastSequence == SeqNo(4))
            }
        }
    }

    /// Proves a writer that skips its catch-up while `PRAGMA data_version` stands still (ADR 0050) still
    /// notices another connection's commits, a purge included (its sequence is kept by `meta.last_seq` only).
    @Test func aWriterNoticesAnotherConnectionsPurge() throws {
        try withTwoConnections { a, b in
            _ = try a.save(Document(id: "a1", properties: ["n": 1]))
            _ = try a.save(Document(id: "a2", properties: ["n": 2]))
            #expect(try b.purge("a1"))
            _ = try a.save(Document(id: "a3", properties: ["n": 3]))
            _ = try a.save(Document(id: "a4", properties: ["n": 4]))
            let feed = try a.changes(since: .zero)
            #expect(feed.map(\.id) == ["a2", "a3", "a4"])
            #expect(feed.map(\.sequence) == [SeqNo(2), SeqNo(4), SeqNo(5)])
            #expect(a.lastSequence == SeqNo(5))
            #expect(b.lastSequence == SeqNo(5))
        }
    }

    /// Two `Database` objects on one new file (two connections, as two processes), closed and removed after `body`.
    private func withTwoConnections(_ body: (Database, Database) throws -> Void) throws {
        let dir = TemporaryDirectory.make("lite")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let a = try Database(name: "db", directory: dir)
        let b = try Database(name: "db", directory: dir)
        defer {
            a.close()
            b.close()
        }
        try body(a, b)
    }

    /// Proves a follower of `changes` hears of another connection's commits (a live query in one process,
    /// writes in another) without writing itself, within the poll interval.
    @Test func changesReportOtherConnectionsCommits() async throws {
        let dir = TemporaryDirectory.make("lite")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let follower = try Database(name: "db", directory: dir)
        let writer = try Database(name: "db", directory: dir)
        defer {
            follower.close()
            writer.close()
        }
        let stream = follower.changes
        _ = try writer.save(Document(id: "elsewhere", properties: ["type": "image"]))
        let seen = await withTaskGroup(of: [String].self) { group in
            group.addTask {
                for await change in stream { return change.documentIDs }
                return []
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(10))
                return []
            }
            let first = await group.next() ?? []
            group.cancelAll()
            return first
        }
        #expect(seen == ["elsewhere"])
    }
}
