import Foundation
import SetteeDocument
import SetteeGateway
import SetteeJSON
import Testing

@Suite struct WaiterScaleTests {
    @Test func aWriteReachesAThousandWaitingFeeds() async throws {
        // Proves: 1,000 feeds waiting on one channel (longpoll clients, in process) are all woken by one
        // write to it and each then finds the row; prints the time from the write to the last wake-up.
        let f = try await Fixture.open(
            DatabaseOptions(name: "db", users: ["fan": json(#"{"password":"secret","admin_channels":["news"]}"#)]))
        let fan = try #require(f.db.userContext("fan"))
        let since = try await f.db.changes(ChangesQuery(), user: fan).lastSeq
        let clients = 1000
        let woken = await withTaskGroup(of: ContinuousClock.Instant?.self) { group -> [ContinuousClock.Instant?] in
            for _ in 0..<clients {
                group.addTask {
                    let ok = await f.db.waitForChange(after: since, user: fan, deadline: .now + .seconds(60))
                    guard ok, let page = try? await f.db.changes(ChangesQuery(since: since), user: fan),
                        page.rows.map(\.id) == ["story"]
                    else { return nil }
                    return ContinuousClock.now
                }
            }
            try? await Task.sleep(for: .milliseconds(500))
            let written = ContinuousClock.now
            _ = try? await f.db.put("story", body: json(#"{"channels":["news"]}"#), user: nil)
            var out: [ContinuousClock.Instant?] = []
            for await t in group { out.append(t) }
            if let last = out.compactMap({ $0 }).max() {
                print("gateway core (debug): write to \(clients) waiting feeds woken and answered in \(last - written)")
            }
            return out
        }
        #expect(woken.count == clients && woken.allSatisfy { $0 != nil })
        await f.close()
    }
}
