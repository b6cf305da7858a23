import Foundation
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeSQLite
import SetteeTestSupport
import Testing

@Suite struct RevIDGoldenLiteTests {
    // Proves Lite's save paths (a new document: the insert-if-absent path; an edit and a delete: the general
    // path) give the pinned revision ids (computed outside Swift, see `RevIDGoldenTests`), and that the
    // row's `winner` column holds each id's text.
    @Test func savesGivePinnedRevisionIDs() throws {
        let db = try Database(name: "golden", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        let first = try db.put(
            Document(
                id: "d",
                properties: .object([
                    ("type", "note"), ("n", 3), ("title", "note 3"), ("done", false), ("text", "lorem ipsum "),
                ])))
        #expect(first.revision?.description == "1-4d6ee688b49710557aea6ba22ea9f61f")
        #expect(try winnerColumn(db) == "1-4d6ee688b49710557aea6ba22ea9f61f")
        var edit = first
        edit.properties = .object([
            ("type", "note"), ("n", 4), ("title", "note é"), ("done", true), ("text", "tab\there"),
        ])
        let second = try db.put(edit)
        #expect(second.revision?.description == "2-b0ffb75da31337f1d80e9a82fde728b1")
        #expect(try winnerColumn(db) == "2-b0ffb75da31337f1d80e9a82fde728b1")
        let tombstone = try db.delete("d")
        #expect(tombstone.description == "3-6a61135953e63782db24f88c4d581aa8")
        #expect(try winnerColumn(db) == "3-6a61135953e63782db24f88c4d581aa8")
    }

    private func winnerColumn(_ db: Database) throws -> String? {
        var options = Connection.Options()
        options.readOnly = true
        options.create = false
        let c = try Connection(path: db.path, options: options)
        defer { c.close() }
        let s = try c.prepare("SELECT winner FROM docs WHERE id = 'd'")
        defer { s.reset() }
        return try s.step() ? s.text(at: 0) : nil
    }
}
