const u=require("@trufflesuite/uws-js-unofficial"); const net=require("net");
const a=u.App();
a.any("/*",(res,req)=>{res.end("slash "+req.getUrl())});
a.any("*",(res,req)=>{res.end("star "+req.getUrl())});
function ex(port, text){return new Promise(r=>{const s=net.connect(port,"127.0.0.1");let got="";s.on("data",d=>{got+=d; s.destroy()});s.on("close",()=>r(got));s.on("error",()=>{});s.write(text);setTimeout(()=>s.destroy(),1500)})}
a.listen("127.0.0.1",0,async(ls)=>{const port=u.us_socket_local_port(ls);
for (const t of ["GET http://o.example/healthz HTTP/1.1\r\nHost: x\r\n\r\n","GET * HTTP/1.1\r\nHost: x\r\n\r\n","GET / HTTP/1.1\r\nHost: x\r\n\r\n","GET /a?b HTTP/1.1\r\nHost: x\r\n\r\n","get /a HTTP/1.1\r\nHost: x\r\n\r\n","GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n", "GET /x HTTP/1.1\r\nHost: x\r\nX-Big: "+"a".repeat(70000)+"\r\n\r\n", "GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"]) console.log(JSON.stringify(t.slice(0,50)),"=>",JSON.stringify((await ex(port,t)).slice(0,200)));
a.close();});
