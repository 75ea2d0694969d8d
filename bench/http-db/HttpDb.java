// HttpDb -- the Java peer of examples/http_db.c for weft-bench http-db: the
// virtual-threads article's service with a real database.  GET /db runs
// SELECT pg_sleep(0.1) through JDBC (the PostgreSQL driver, Debian's
// libpostgresql-jdbc-java) on a connection from a pool bounded by a
// Semaphore (default 200); a plain com.sun.net.httpserver handler.
//
// usage: java -cp CLASSES:postgresql.jar HttpDb PORT JDBC_URL MODEL [DB_POOL [SLEEP_S]]
//   MODEL virtual  the server's executor makes a virtual thread per request
//                  (Java 21+; the source stays Java 17, the executor is
//                  looked up by reflection, as ../shared/peers/http does)
//         pool:T   a fixed pool of T platform threads (Tomcat's 200)
// It opens every pool connection, then prints "listening on 127.0.0.1:PORT"
// (PORT 0: the kernel's pick).  GET /hello.html answers without the
// database.  SIGTERM ends it (the JVM's default).
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Semaphore;

public class HttpDb {
    static final ConcurrentLinkedDeque<Connection> free = new ConcurrentLinkedDeque<>();
    static Semaphore permits;
    static String query;

    public static void main(String[] a) throws Exception {
        if (a.length < 3 || a.length > 5) {
            System.err.println("usage: HttpDb PORT JDBC_URL virtual|pool:T [DB_POOL [SLEEP_S]]");
            System.exit(2);
        }
        int port = Integer.parseInt(a[0]);
        String url = a[1];
        String[] model = a[2].split(":");
        int dbPool = a.length > 3 ? Integer.parseInt(a[3]) : 200;
        double sleepS = a.length > 4 ? Double.parseDouble(a[4]) : 0.1;
        query = "SELECT pg_sleep(" + sleepS + ")";

        ExecutorService executor;
        if (model[0].equals("virtual")) {
            executor = (ExecutorService) Executors.class.getMethod("newVirtualThreadPerTaskExecutor").invoke(null);
        } else if (model[0].equals("pool") && model.length == 2) {
            executor = Executors.newFixedThreadPool(Integer.parseInt(model[1]));
        } else {
            throw new IllegalArgumentException("bad model " + a[2]);
        }

        // the pool: every connection opened before the server listens
        for (int i = 0; i < dbPool; i++) free.push(DriverManager.getConnection(url));
        permits = new Semaphore(dbPool, true);

        HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getByName("127.0.0.1"), port), 4096);
        server.createContext("/db", HttpDb::db);
        server.createContext("/hello.html", ex -> reply(ex, 200, "hello\n"));
        server.setExecutor(executor);
        server.start();
        System.out.println("listening on 127.0.0.1:" + server.getAddress().getPort());
        System.out.flush();
    }

    static void db(HttpExchange ex) throws IOException {
        String body;
        int code;
        try {
            permits.acquire();
            Connection c = free.pop();
            try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery(query)) {
                rs.next();
                code = 200;
                body = "ok\n";
            } finally {
                free.push(c);
                permits.release();
            }
        } catch (SQLException | InterruptedException e) {
            code = 500;
            body = e + "\n";
        }
        reply(ex, code, body);
    }

    static void reply(HttpExchange ex, int code, String body) throws IOException {
        byte[] b = body.getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("Content-Type", "text/plain");
        ex.sendResponseHeaders(code, b.length);
        try (OutputStream os = ex.getResponseBody()) {
            os.write(b);
        }
    }
}
