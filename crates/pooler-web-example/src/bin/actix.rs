//! Serves the actix-web version of the example on 127.0.0.1:3001 until Ctrl-C, then closes
//! the pool gracefully.

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let url = std::env::var("POOLER_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = pooler_web_example::pool(&url).await?;
    let listener = std::net::TcpListener::bind("127.0.0.1:3001")?;
    println!("serving on http://{}", listener.local_addr()?);
    let ctrl_c = async {
        // No Ctrl-C handler (an unusual platform): serve until killed.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    pooler_web_example::actix::serve(listener, pool, ctrl_c).await?;
    println!("closed the pool; bye");
    Ok(())
}
